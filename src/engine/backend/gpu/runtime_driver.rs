//! The GPU driver written once for both vendors: [`RuntimeDriver`] implements
//! [`GpuDriver`] over a [`VendorRuntime`] (the CUDA or HIP calls it makes, in `cuda.rs` and
//! `hip.rs`) and a [`KernelCompiler`] (NVRTC or hiprtc). What the calls mean, in which order
//! they run, how the kernel cache is used and what a failure reads as live here; the vendor
//! files only say how each call is spelled and how its status becomes a [`DriverError`].

use std::collections::HashMap;
use std::ffi::{c_void, CStr, CString};
use std::sync::{Mutex, PoisonError};

use super::cache::{CacheKey, KernelCache};
use super::cudnn::Dnn;
use super::driver::{
    argument_slots, ColumnMajorGemm, DeviceInfo, DevicePtr, DnnConv, DriverError, Gemm, GemmTypes,
    GpuDriver, KernelArg, LaunchShape, MatmulPrecision, Transpose,
};
use super::source::{self, Dialect, KERNEL_NAMES};
use crate::engine::Precision;

/// A vendor's run-time kernel compiler (NVRTC, hiprtc): the calls that turn the engine's
/// kernel source into a code object for one GPU architecture, without a GPU.
pub trait KernelCompiler {
    /// The compiler's handle of one program being compiled.
    type Program: Copy;
    /// The source dialect the compiler takes (the HIP prelude or none).
    const DIALECT: Dialect;

    /// The compiler options the engine's kernels are built with for `arch`.
    fn kernel_options(arch: &str) -> Vec<String>;
    /// `nvrtc 12.4`, `hiprtc 6.2`: what a compiled image is reported as built by.
    fn version(&self) -> String;
    /// # Safety
    /// The compiler's library is loaded with every entry point this trait calls.
    unsafe fn create_program(&self, source: &CStr) -> Result<Self::Program, DriverError>;
    /// Whether the program compiled; when not, [`Self::program_log`] says why.
    ///
    /// # Safety
    /// `program` is live.
    unsafe fn compile_program(&self, program: Self::Program, options: &[String]) -> bool;
    /// The compiler's log of `program`, as text.
    ///
    /// # Safety
    /// `program` is live.
    unsafe fn program_log(&self, program: Self::Program) -> String;
    /// Bytes of the compiled code object.
    ///
    /// # Safety
    /// `program` compiled and is live.
    unsafe fn code_size(&self, program: Self::Program) -> Result<usize, DriverError>;
    /// Copies the code object into `image`, which holds [`Self::code_size`] bytes.
    ///
    /// # Safety
    /// `program` compiled and is live.
    unsafe fn copy_code(&self, program: Self::Program, image: &mut [u8])
        -> Result<(), DriverError>;
    /// # Safety
    /// `program` is live and not used after this.
    unsafe fn destroy_program(&self, program: Self::Program);
}

/// One vendor runtime's device, memory, stream, module, BLAS, event and peer calls, bound
/// to one device. Each call returns the vendor's status already mapped to a
/// [`DriverError`] that names the vendor's call; the `unsafe` ones take handles that this
/// runtime created and that are still live, and device ranges that hold the bytes named.
pub trait VendorRuntime: Send + Sync + Sized + 'static {
    /// A stream handle (`CUstream`, `hipStream_t`).
    type Stream: Copy;
    /// A loaded code object.
    type Module: Copy;
    /// One kernel of a loaded module.
    type Function: Copy;
    /// A timing event.
    type Event: Copy;
    /// The vendor BLAS's handle (cuBLAS, rocBLAS).
    type Blas: Copy;
    /// The compiler the engine's kernels are built with.
    type Compiler: KernelCompiler;
    /// `cuda` or `hip`: [`GpuDriver::runtime`], and the kernel cache's runtime.
    const RUNTIME: &'static str;
    /// `CUDA` or `HIP`, as messages name the vendor.
    const LABEL: &'static str;

    /// Makes this runtime's device current on the calling thread; every call goes after it.
    fn bind(&self) -> Result<(), DriverError>;
    /// The compiler, for building the kernels when the cache has none that load.
    fn compiler(&self) -> &Self::Compiler;
    /// The compiler's version as the kernel cache's key takes it: what must change for the
    /// cached code objects to be built again.
    fn cache_version(&self) -> String;
    /// The cuDNN-style library convolutions may go through, if this runtime has one open.
    fn dnn(&self) -> Option<&Dnn> {
        None
    }
    /// Called once the driver's stream exists, for libraries that enqueue on it.
    fn attach_stream(&mut self, stream: Self::Stream) {
        let _ = stream;
    }
    /// The stream as the untyped pointer other libraries take (NCCL, RCCL).
    fn stream_pointer(stream: Self::Stream) -> *mut c_void;

    /// `Ok(None)` when the device has no room for `bytes`.
    ///
    /// # Safety
    /// The device is bound.
    unsafe fn malloc(&self, bytes: usize) -> Result<Option<DevicePtr>, DriverError>;
    /// # Safety
    /// `ptr` came from [`Self::malloc`] and no queued work uses it.
    unsafe fn free(&self, ptr: DevicePtr);
    /// # Safety
    /// See the trait.
    unsafe fn copy_to_device_async(
        &self,
        stream: Self::Stream,
        dst: DevicePtr,
        src: *const u8,
        bytes: usize,
    ) -> Result<(), DriverError>;
    /// # Safety
    /// See the trait.
    unsafe fn copy_to_host_async(
        &self,
        stream: Self::Stream,
        dst: *mut u8,
        src: DevicePtr,
        bytes: usize,
    ) -> Result<(), DriverError>;
    /// # Safety
    /// See the trait.
    unsafe fn copy_on_device_async(
        &self,
        stream: Self::Stream,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
    ) -> Result<(), DriverError>;
    /// Sets `bytes` bytes from `dst` to zero.
    ///
    /// # Safety
    /// See the trait.
    unsafe fn zero_async(
        &self,
        stream: Self::Stream,
        dst: DevicePtr,
        bytes: usize,
    ) -> Result<(), DriverError>;
    /// Waits for everything enqueued on `stream`.
    ///
    /// # Safety
    /// See the trait.
    unsafe fn synchronize(&self, stream: Self::Stream) -> Result<(), DriverError>;
    /// A stream that does not wait on the legacy default stream.
    fn create_stream(&self) -> Result<Self::Stream, DriverError>;
    /// # Safety
    /// Nothing is queued on `stream` and it is not used after this.
    unsafe fn destroy_stream(&self, stream: Self::Stream);

    /// # Safety
    /// `image` is a complete code object for this device.
    unsafe fn load_module(&self, image: &[u8]) -> Result<Self::Module, DriverError>;
    /// # Safety
    /// No queued work uses the module's kernels.
    unsafe fn unload_module(&self, module: Self::Module);
    /// The kernel `name` of `module`, or `None` when the module has none by that name.
    ///
    /// # Safety
    /// `module` is loaded.
    unsafe fn function(&self, module: Self::Module, name: &CStr) -> Option<Self::Function>;
    /// Enqueues `function` with `args`, one pointer to each argument's value.
    ///
    /// # Safety
    /// The arguments match the kernel's C signature and live until the call returns.
    unsafe fn launch(
        &self,
        stream: Self::Stream,
        function: Self::Function,
        shape: LaunchShape,
        args: &mut [*mut c_void],
    ) -> Result<(), DriverError>;

    /// A BLAS handle whose work goes on `stream` (in the math mode the runtime was opened
    /// with).
    ///
    /// # Safety
    /// See the trait.
    unsafe fn create_blas(&self, stream: Self::Stream) -> Result<Self::Blas, DriverError>;
    /// # Safety
    /// No queued work uses the handle and it is not used after this.
    unsafe fn destroy_blas(&self, blas: Self::Blas);
    /// The f32 product `c := alpha·op(first)·op(second) + beta·c`, column-major.
    ///
    /// # Safety
    /// The matrices are live device ranges of the shapes `gemm` names.
    unsafe fn sgemm(
        &self,
        blas: Self::Blas,
        gemm: &ColumnMajorGemm,
        alpha: f32,
        beta: f32,
    ) -> Result<(), DriverError>;
    /// The same product on operands and output in `types`, with f32 arithmetic; with
    /// `fast_f32`, f32 operands may take the faster f32 path the runtime was opened to
    /// allow (TF32 tensor cores on CUDA).
    ///
    /// # Safety
    /// As [`Self::sgemm`], with elements of the formats `types` names.
    unsafe fn gemm_ex(
        &self,
        blas: Self::Blas,
        gemm: &ColumnMajorGemm,
        alpha: f32,
        beta: f32,
        types: GemmTypes,
        fast_f32: bool,
    ) -> Result<(), DriverError>;

    /// An event for timing work on a stream.
    fn create_event(&self) -> Result<Self::Event, DriverError>;
    /// # Safety
    /// See the trait.
    unsafe fn record_event(
        &self,
        event: Self::Event,
        stream: Self::Stream,
    ) -> Result<(), DriverError>;
    /// Waits until the work recorded before `event` is done.
    ///
    /// # Safety
    /// See the trait.
    unsafe fn synchronize_event(&self, event: Self::Event) -> Result<(), DriverError>;
    /// Milliseconds of device time between two completed events.
    ///
    /// # Safety
    /// See the trait.
    unsafe fn elapsed_ms(&self, start: Self::Event, end: Self::Event) -> Result<f32, DriverError>;
    /// # Safety
    /// Nothing waits on `event` and it is not used after this.
    unsafe fn destroy_event(&self, event: Self::Event);

    /// Page-locked host memory of `bytes` (at least one).
    fn alloc_pinned(&self, bytes: usize) -> Result<*mut u8, DriverError>;
    /// # Safety
    /// `ptr` came from [`Self::alloc_pinned`] and no copy uses it.
    unsafe fn free_pinned(&self, ptr: *mut u8);
    /// Whether this device can reach `peer`'s memory directly.
    fn can_access_peer(&self, peer: &Self) -> bool;
    /// Lets this device reach `peer`'s memory; "already enabled" is no failure, so the
    /// runtime's answer is not looked at.
    fn enable_peer_access(&self, peer: &Self);
    /// # Safety
    /// `src` on this device and `dst` on `peer` hold `bytes`.
    unsafe fn copy_to_peer_async(
        &self,
        stream: Self::Stream,
        peer: &Self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
    ) -> Result<(), DriverError>;
    /// Closes what [`Self::attach_stream`] opened, before the BLAS handle and the stream go.
    ///
    /// # Safety
    /// The stream has drained.
    unsafe fn detach_stream(&self) {}
    /// Lets go of the device, after every handle of it is gone.
    ///
    /// # Safety
    /// Nothing of the device is used after this.
    unsafe fn release(&self) {}
}

/// Calls an SGEMM entry point (`cublasSgemm_v2`, `rocblas_sgemm`) on a column-major
/// product, with the arguments in the order cuBLAS set and rocBLAS kept: the handle, the
/// two operations (`$operation` turns a [`Transpose`] into the library's), m, n, k,
/// alpha, each operand with its leading dimension, beta, and C with its.
macro_rules! blas_sgemm {
    ($sgemm:expr, $handle:expr, $operation:expr, $gemm:expr, $alpha:expr, $beta:expr) => {{
        let cm: &$crate::engine::backend::gpu::driver::ColumnMajorGemm = $gemm;
        $sgemm(
            $handle,
            $operation(cm.trans_first),
            $operation(cm.trans_second),
            cm.m as i32,
            cm.n as i32,
            cm.k as i32,
            &$alpha,
            cm.first.0 as *const f32,
            cm.ld_first as i32,
            cm.second.0 as *const f32,
            cm.ld_second as i32,
            &$beta,
            cm.c.0 as *mut f32,
            cm.ldc as i32,
        )
    }};
}
pub(super) use blas_sgemm;

/// Calls a mixed-format GEMM entry point (`cublasGemmEx`, `rocblas_gemm_ex`) on a
/// column-major product: the arguments the two libraries share, in their order, with both
/// operands in `$operands` and C in `$output`, then `$rest`, which differ (the output
/// matrix D, the compute type, the algorithm).
macro_rules! blas_gemm_ex {
    (
        $gemm_ex:expr, $handle:expr, $operation:expr, $gemm:expr, $alpha:expr, $beta:expr,
        $operands:expr, $output:expr, $($rest:expr),* $(,)?
    ) => {{
        let cm: &$crate::engine::backend::gpu::driver::ColumnMajorGemm = $gemm;
        let operands = $operands;
        $gemm_ex(
            $handle,
            $operation(cm.trans_first),
            $operation(cm.trans_second),
            cm.m as i32,
            cm.n as i32,
            cm.k as i32,
            (&$alpha as *const f32).cast(),
            cm.first.0 as *const ::std::ffi::c_void,
            operands,
            cm.ld_first as i32,
            cm.second.0 as *const ::std::ffi::c_void,
            operands,
            cm.ld_second as i32,
            (&$beta as *const f32).cast(),
            cm.c.0 as *mut ::std::ffi::c_void,
            $output,
            cm.ldc as i32,
            $($rest),*
        )
    }};
}
pub(super) use blas_gemm_ex;

/// A driver call's failure with the vendor's own words for it.
pub(super) fn call_error(call: &'static str, error: impl std::fmt::Debug) -> DriverError {
    DriverError::Call {
        call,
        message: format!("{error:?}"),
    }
}

/// Runs `work` inside the panic guard: a runtime library that panics (a symbol it lacks, a
/// library that fails to load) comes back as [`DriverError::LibraryMissing`] saying
/// `what` failed.
pub(super) fn guarded<T>(
    what: &str,
    work: impl FnOnce() -> Result<T, DriverError>,
) -> Result<T, DriverError> {
    crate::runtime::guard::catch(work)
        .unwrap_or_else(|panic| Err(DriverError::LibraryMissing(format!("{what}: {panic}"))))
}

/// Refuses an ordinal past the devices the runtime sees.
pub(super) fn check_ordinal(
    runtime: &'static str,
    ordinal: usize,
    count: usize,
) -> Result<(), DriverError> {
    if ordinal < count {
        return Ok(());
    }
    Err(DriverError::NoDevice {
        runtime,
        ordinal,
        count,
    })
}

/// The engine's kernels compiled for `arch` as the backend compiles them, with no GPU
/// needed: the code object and the compiler's version.
pub(super) fn compile_kernels<C: KernelCompiler>(
    compiler: &C,
    arch: &str,
) -> Result<(Vec<u8>, String), DriverError> {
    let image = compile(
        compiler,
        &source::assemble(C::DIALECT),
        arch,
        &C::kernel_options(arch),
    )?;
    Ok((image, compiler.version()))
}

fn compile<C: KernelCompiler>(
    compiler: &C,
    source: &str,
    arch: &str,
    options: &[String],
) -> Result<Vec<u8>, DriverError> {
    let compile_error = |log: String| DriverError::Compile {
        arch: arch.to_string(),
        log,
    };
    let c_source = CString::new(source).map_err(|e| compile_error(e.to_string()))?;
    // SAFETY: the compiler's entry points were checked when its library was opened.
    let program = unsafe { compiler.create_program(&c_source) }?;
    // SAFETY: `program` is live until destroyed at the end of this function.
    let result = unsafe {
        if compiler.compile_program(program, options) {
            compiled_code(compiler, program)
        } else {
            Err(compile_error(compiler.program_log(program)))
        }
    };
    // SAFETY: created above and not used after this.
    unsafe { compiler.destroy_program(program) };
    result
}

/// # Safety
/// `program` compiled and is live.
unsafe fn compiled_code<C: KernelCompiler>(
    compiler: &C,
    program: C::Program,
) -> Result<Vec<u8>, DriverError> {
    let size = compiler.code_size(program)?;
    if size == 0 {
        return Err(DriverError::InvalidArgument(
            "the kernel compiler produced an empty code object".into(),
        ));
    }
    let mut image = vec![0u8; size];
    compiler.copy_code(program, &mut image)?;
    Ok(image)
}

/// The engine's kernels for `arch`, from the cache when a loadable image is there,
/// otherwise compiled and cached.
fn load_kernels<V: VendorRuntime>(
    vendor: &V,
    arch: &str,
    cache: &KernelCache,
) -> Result<V::Module, DriverError> {
    let source = source::assemble(V::Compiler::DIALECT);
    let version = vendor.cache_version();
    let options = V::Compiler::kernel_options(arch);
    let key = CacheKey {
        runtime: V::RUNTIME,
        arch,
        compiler_version: &version,
        options: &options,
        source: &source,
    };
    if let Some(image) = cache.load(&key) {
        // SAFETY: the cache hands back whole images it stored for this key.
        match unsafe { vendor.load_module(&image) } {
            Ok(module) => return Ok(module),
            Err(error) => {
                tracing::warn!(
                    %error,
                    "cached {} kernels did not load; compiling again",
                    V::LABEL
                );
                cache.evict(&key);
            }
        }
    }
    let image = compile(vendor.compiler(), &source, arch, &options)?;
    // SAFETY: a complete code object, compiled just now for this device.
    let module = unsafe { vendor.load_module(&image) }?;
    cache.store(&key, &image);
    Ok(module)
}

/// The handles the driver owns on its device.
struct Handles<V: VendorRuntime> {
    stream: V::Stream,
    module: V::Module,
    functions: HashMap<&'static str, V::Function>,
    blas: V::Blas,
}

// SAFETY: the runtimes' handles may be used from any thread once the device is current,
// which every call makes it first; the BLAS handle is only used under `gemm_lock`.
unsafe impl<V: VendorRuntime> Send for Handles<V> {}
unsafe impl<V: VendorRuntime> Sync for Handles<V> {}

/// A [`GpuDriver`] on one device of the vendor runtime `V`, with one in-order stream of
/// its own, the engine's kernels loaded and a BLAS handle on that stream.
pub struct RuntimeDriver<V: VendorRuntime> {
    info: DeviceInfo,
    vendor: V,
    handles: Handles<V>,
    gemm_lock: Mutex<()>,
}

impl<V: VendorRuntime> std::fmt::Debug for RuntimeDriver<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeDriver")
            .field("runtime", &V::RUNTIME)
            .field("info", &self.info)
            .finish()
    }
}

impl<V: VendorRuntime> RuntimeDriver<V> {
    /// The driver on the device `vendor` is bound to (and which `info` describes): a
    /// stream of its own, the engine's kernels (from the cache or compiled now) and a BLAS
    /// handle.
    pub(super) fn start(
        mut vendor: V,
        info: DeviceInfo,
        cache: &KernelCache,
    ) -> Result<Self, DriverError> {
        let stream = vendor.create_stream()?;
        let module = load_kernels(&vendor, &info.arch, cache)?;
        let mut functions = HashMap::new();
        for &name in KERNEL_NAMES {
            let c_name = CString::new(name).map_err(|e| call_error("kernel name", e))?;
            // SAFETY: the module is loaded and stays loaded as long as the driver.
            let function = unsafe { vendor.function(module, &c_name) }
                .ok_or_else(|| DriverError::UnknownKernel(name.to_string()))?;
            functions.insert(name, function);
        }
        // SAFETY: the stream belongs to the bound device.
        let blas = unsafe { vendor.create_blas(stream) }?;
        vendor.attach_stream(stream);
        Ok(RuntimeDriver {
            info,
            vendor,
            handles: Handles {
                stream,
                module,
                functions,
                blas,
            },
            gemm_lock: Mutex::new(()),
        })
    }

    fn same_runtime(peer: &dyn GpuDriver) -> Result<&Self, DriverError> {
        peer.as_any().downcast_ref::<Self>().ok_or_else(|| {
            DriverError::InvalidArgument(format!("peer is not a {} device", V::LABEL))
        })
    }

    fn stream(&self) -> V::Stream {
        self.handles.stream
    }
}

impl<V: VendorRuntime> GpuDriver for RuntimeDriver<V> {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn native_stream(&self) -> *mut c_void {
        V::stream_pointer(self.stream())
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn runtime(&self) -> &'static str {
        V::RUNTIME
    }

    fn alloc(&self, bytes: usize) -> Result<DevicePtr, DriverError> {
        self.vendor.bind()?;
        // SAFETY: a plain device allocation on the bound device.
        match unsafe { self.vendor.malloc(bytes.max(1)) }? {
            Some(ptr) => Ok(ptr),
            None => Err(DriverError::OutOfMemory { bytes }),
        }
    }

    unsafe fn free(&self, ptr: DevicePtr) {
        if self.vendor.bind().is_ok() {
            self.vendor.free(ptr);
        }
    }

    fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<(), DriverError> {
        self.vendor.bind()?;
        // SAFETY: `dst` holds at least `src.len()` bytes (the backend checks lengths); the
        // stream is drained before returning, so `src` outlives the copy.
        unsafe {
            self.vendor
                .copy_to_device_async(self.stream(), dst, src.as_ptr(), src.len())?;
        }
        self.synchronize()
    }

    fn copy_to_host(&self, dst: &mut [u8], src: DevicePtr) -> Result<(), DriverError> {
        self.vendor.bind()?;
        // SAFETY: as above, and the stream is drained before `dst` is read.
        unsafe {
            self.vendor
                .copy_to_host_async(self.stream(), dst.as_mut_ptr(), src, dst.len())?;
        }
        self.synchronize()
    }

    fn copy_on_device(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
    ) -> Result<(), DriverError> {
        self.vendor.bind()?;
        // SAFETY: both ranges are live allocations of at least `bytes`.
        unsafe {
            self.vendor
                .copy_on_device_async(self.stream(), dst, src, bytes)
        }
    }

    fn zero(&self, dst: DevicePtr, bytes: usize) -> Result<(), DriverError> {
        self.vendor.bind()?;
        // SAFETY: `dst` is a live allocation of at least `bytes`.
        unsafe { self.vendor.zero_async(self.stream(), dst, bytes) }
    }

    fn launch(
        &self,
        kernel: &str,
        shape: LaunchShape,
        args: &[KernelArg],
    ) -> Result<(), DriverError> {
        let function = *self
            .handles
            .functions
            .get(kernel)
            .ok_or_else(|| DriverError::UnknownKernel(kernel.to_string()))?;
        self.vendor.bind()?;
        let mut slots = argument_slots(args);
        let mut pointers: Vec<*mut c_void> =
            slots.iter_mut().map(|s| s.as_mut_ptr().cast()).collect();
        // SAFETY: the arguments match the kernel's C signature (the backend passes them in
        // declaration order with the declared types), and `slots` outlives the call, which
        // copies them.
        unsafe {
            self.vendor
                .launch(self.stream(), function, shape, &mut pointers)
        }
        .map_err(|error| match error {
            DriverError::Call { call, message } => DriverError::Call {
                call,
                message: format!("{kernel}: {message}"),
            },
            other => other,
        })
    }

    fn gemm(&self, g: &Gemm) -> Result<(), DriverError> {
        g.validate()?;
        if g.m == 0 || g.n == 0 {
            return Ok(());
        }
        self.vendor.bind()?;
        let cm = g.column_major();
        let _guard = self
            .gemm_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // SAFETY: the shapes were validated against the leading dimensions; the pointers
        // are live allocations the backend sized for them, in the formats `types` names.
        unsafe {
            if g.types.is_f32() {
                self.vendor.sgemm(self.handles.blas, &cm, g.alpha, g.beta)
            } else {
                self.vendor
                    .gemm_ex(self.handles.blas, &cm, g.alpha, g.beta, g.types, false)
            }
        }
    }

    fn synchronize(&self) -> Result<(), DriverError> {
        self.vendor.bind()?;
        // SAFETY: the stream lives as long as the driver.
        unsafe { self.vendor.synchronize(self.stream()) }
    }

    fn dnn_library(&self) -> Option<String> {
        self.vendor.dnn().map(|d| d.version.clone())
    }

    fn dnn_conv(&self, conv: &DnnConv) -> Result<bool, DriverError> {
        let Some(dnn) = self.vendor.dnn() else {
            return Ok(false);
        };
        self.vendor.bind()?;
        dnn.run(
            conv,
            &|bytes| self.alloc(bytes),
            // SAFETY: the workspace is only freed once the stream drains.
            &|ptr| unsafe {
                let _ = self.synchronize();
                self.free(ptr)
            },
        )?;
        Ok(true)
    }

    fn alloc_pinned(&self, bytes: usize) -> Result<*mut u8, DriverError> {
        self.vendor.bind()?;
        self.vendor.alloc_pinned(bytes.max(1))
    }

    unsafe fn free_pinned(&self, ptr: *mut u8) {
        self.vendor.free_pinned(ptr);
    }

    unsafe fn copy_async(
        &self,
        to_device: bool,
        host: *mut u8,
        device: DevicePtr,
        bytes: usize,
    ) -> Result<(), DriverError> {
        self.vendor.bind()?;
        if to_device {
            self.vendor
                .copy_to_device_async(self.stream(), device, host, bytes)
        } else {
            self.vendor
                .copy_to_host_async(self.stream(), host, device, bytes)
        }
    }

    fn enable_peer_access(&self, peer: &dyn GpuDriver) -> Result<(), DriverError> {
        let peer = Self::same_runtime(peer)?;
        self.vendor.bind()?;
        if self.vendor.can_access_peer(&peer.vendor) {
            self.vendor.enable_peer_access(&peer.vendor);
        }
        Ok(())
    }

    fn copy_to_peer_async(
        &self,
        peer: &dyn GpuDriver,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
    ) -> Result<(), DriverError> {
        let peer = Self::same_runtime(peer)?;
        self.vendor.bind()?;
        // SAFETY: both ranges hold `bytes` on their own devices.
        unsafe {
            self.vendor
                .copy_to_peer_async(self.stream(), &peer.vendor, dst, src, bytes)
        }
    }

    fn matmul_square(
        &self,
        precision: MatmulPrecision,
        n: usize,
        a: DevicePtr,
        b: DevicePtr,
        c: DevicePtr,
    ) -> Result<(), DriverError> {
        self.vendor.bind()?;
        if i32::try_from(n).is_err() {
            return Err(DriverError::InvalidArgument(format!("matmul size {n}")));
        }
        let operands = match precision {
            MatmulPrecision::F16 => Precision::Fp16,
            MatmulPrecision::F32 => Precision::Fp32,
        };
        let square = ColumnMajorGemm {
            trans_first: Transpose::No,
            trans_second: Transpose::No,
            m: n,
            n,
            k: n,
            first: a,
            ld_first: n,
            second: b,
            ld_second: n,
            c,
            ldc: n,
        };
        let types = GemmTypes {
            operands,
            output: Precision::Fp32,
        };
        let _guard = self
            .gemm_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // SAFETY: the caller's pointers hold n×n elements of the types the call names.
        unsafe {
            self.vendor.gemm_ex(
                self.handles.blas,
                &square,
                1.0,
                0.0,
                types,
                precision == MatmulPrecision::F32,
            )
        }
    }

    fn time_ms(
        &self,
        work: &mut dyn FnMut() -> Result<(), DriverError>,
    ) -> Result<f64, DriverError> {
        self.vendor.bind()?;
        let start = self.vendor.create_event()?;
        let end = match self.vendor.create_event() {
            Ok(end) => end,
            Err(error) => {
                // SAFETY: created just now, destroyed once.
                unsafe { self.vendor.destroy_event(start) };
                return Err(error);
            }
        };
        let stream = self.stream();
        // SAFETY: both events and the stream are live until destroyed below.
        let result = unsafe {
            (|| {
                self.vendor.record_event(start, stream)?;
                work()?;
                self.vendor.record_event(end, stream)?;
                self.vendor.synchronize_event(end)?;
                self.vendor.elapsed_ms(start, end).map(f64::from)
            })()
        };
        // SAFETY: recorded work has completed or failed; nothing waits on the events.
        unsafe {
            self.vendor.destroy_event(start);
            self.vendor.destroy_event(end);
        }
        result
    }
}

impl<V: VendorRuntime> Drop for RuntimeDriver<V> {
    fn drop(&mut self) {
        if self.vendor.bind().is_err() {
            return;
        }
        let vendor = &self.vendor;
        // SAFETY: nothing uses the handles after the driver is dropped; the stream is
        // drained first so no queued work refers to them.
        unsafe {
            let _ = vendor.synchronize(self.handles.stream);
            vendor.detach_stream();
            vendor.destroy_blas(self.handles.blas);
            vendor.unload_module(self.handles.module);
            vendor.destroy_stream(self.handles.stream);
            vendor.release();
        }
    }
}
