//! The CUDA calls under the shared [`RuntimeDriver`]: the driver API, NVRTC and cuBLAS
//! through cudarc, every library opened at run time. cudarc panics when a library or
//! symbol is missing, so `open` checks the libraries and every symbol this file calls
//! before the first call, and runs inside a panic guard as a second line.

use std::ffi::{c_void, CStr};

use cudarc::cublas::sys as blas;
use cudarc::driver::result as cu;
use cudarc::driver::sys;
use cudarc::nvrtc::{result as rtc, sys as rtc_sys};

use super::cache::KernelCache;
use super::cudnn::Dnn;
use super::driver::Transpose;
use super::driver::{ColumnMajorGemm, DeviceInfo, DevicePtr, DriverError, GemmTypes, LaunchShape};
use super::runtime_driver::{
    self, blas_gemm_ex, blas_sgemm, call_error as call, check_ordinal, guarded, KernelCompiler,
    RuntimeDriver, VendorRuntime,
};
use super::source::Dialect;
use crate::engine::Precision;

const DRIVER_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetAttribute",
    "cuDeviceTotalMem_v2",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxSetCurrent",
    "cuStreamCreate",
    "cuStreamSynchronize",
    "cuStreamDestroy_v2",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuMemsetD8Async",
    "cuModuleLoadData",
    "cuModuleGetFunction",
    "cuModuleUnload",
    "cuLaunchKernel",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventSynchronize",
    "cuEventElapsedTime",
    "cuEventDestroy_v2",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemcpyPeerAsync",
    "cuDeviceCanAccessPeer",
    "cuCtxEnablePeerAccess",
    "cuGetErrorString",
    "cuGetErrorName",
];

const NVRTC_SYMBOLS: &[&str] = &[
    "nvrtcVersion",
    "nvrtcCreateProgram",
    "nvrtcCompileProgram",
    "nvrtcDestroyProgram",
    "nvrtcGetProgramLogSize",
    "nvrtcGetProgramLog",
    "nvrtcGetCUBINSize",
    "nvrtcGetCUBIN",
];

const CUBLAS_SYMBOLS: &[&str] = &[
    "cublasCreate_v2",
    "cublasDestroy_v2",
    "cublasSetStream_v2",
    "cublasSetMathMode",
    "cublasSgemm_v2",
    "cublasGemmEx",
];

/// How the CUDA backend runs its f32 GEMMs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MathMode {
    /// Plain f32 arithmetic.
    Strict,
    /// TF32 tensor cores for f32 GEMMs (10-bit mantissa products, f32 accumulation).
    Tf32,
}

/// The CUDA driver: one device's primary context, stream, kernels and cuBLAS handle.
pub type CudaDriver = RuntimeDriver<Cuda>;

/// The CUDA side of a [`CudaDriver`]: the device, its primary context, the math mode the
/// GEMMs run in and, when it loads, cuDNN on the driver's stream.
pub struct Cuda {
    device: sys::CUdevice,
    ctx: sys::CUcontext,
    math: MathMode,
    /// cuDNN for convolutions, when it loads (and `TINYPERF_CUDNN` is not `0`).
    dnn: Option<Dnn>,
    compiler: Nvrtc,
}

// SAFETY: driver-API handles may be used from any thread once their context is current,
// which every call of the driver makes it first.
unsafe impl Send for Cuda {}
unsafe impl Sync for Cuda {}

/// NVRTC, which cudarc opens by its own names.
pub struct Nvrtc;

fn blas_check(name: &'static str, status: blas::cublasStatus_t) -> Result<(), DriverError> {
    if status == blas::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(call(name, status))
    }
}

fn rtc_check(name: &'static str, status: rtc_sys::nvrtcResult) -> Result<(), DriverError> {
    match status {
        rtc_sys::nvrtcResult::NVRTC_SUCCESS => Ok(()),
        failed => Err(call(name, failed)),
    }
}

/// Whether the three CUDA libraries the backend needs can be opened, and which symbols
/// any of them lacks; `Err` names what is missing.
pub fn check_libraries() -> Result<(), DriverError> {
    guarded("CUDA libraries failed to load", || {
        // SAFETY: each check only opens the library by its candidate names.
        let present = unsafe {
            [
                (
                    "CUDA driver library (libcuda.so.1)",
                    sys::is_culib_present(),
                ),
                ("NVRTC library (libnvrtc.so)", rtc_sys::is_culib_present()),
                ("cuBLAS library (libcublas.so)", blas::is_culib_present()),
            ]
        };
        if let Some((name, _)) = present.iter().find(|(_, ok)| !ok) {
            return Err(DriverError::LibraryMissing(format!("{name} not found")));
        }
        // SAFETY: the libraries were found just now; `culib` opens them by the same names.
        let mut missing = missing_symbols!(unsafe { sys::culib() }, DRIVER_SYMBOLS);
        missing.extend(missing_symbols!(unsafe { rtc_sys::culib() }, NVRTC_SYMBOLS));
        missing.extend(missing_symbols!(unsafe { blas::culib() }, CUBLAS_SYMBOLS));
        if missing.is_empty() {
            Ok(())
        } else {
            Err(DriverError::LibraryMissing(format!(
                "the CUDA libraries lack {}",
                missing.join(", ")
            )))
        }
    })
}

/// Number of CUDA devices, or why there are none to use.
pub fn device_count() -> Result<usize, DriverError> {
    check_libraries()?;
    crate::runtime::guard::catch(counted_devices)
        .unwrap_or_else(|panic| Err(DriverError::LibraryMissing(panic)))
}

fn counted_devices() -> Result<usize, DriverError> {
    cu::init().map_err(|e| call("cuInit", e))?;
    cu::device::get_count()
        .map(|n| n.max(0) as usize)
        .map_err(|e| call("cuDeviceGetCount", e))
}

impl RuntimeDriver<Cuda> {
    /// Opens device `ordinal`: its primary context, a stream of its own, the engine's
    /// kernels (from the cache or compiled now) and a cuBLAS handle in `math` mode.
    pub fn open(ordinal: usize, cache: &KernelCache, math: MathMode) -> Result<Self, DriverError> {
        check_libraries()?;
        guarded("CUDA failed", || {
            let (cuda, info) = Cuda::attach(ordinal, math)?;
            RuntimeDriver::start(cuda, info, cache)
        })
    }
}

impl Cuda {
    /// Device `ordinal` with its primary context current on this thread, and what it
    /// reports about itself.
    fn attach(ordinal: usize, math: MathMode) -> Result<(Cuda, DeviceInfo), DriverError> {
        let count = counted_devices()?;
        check_ordinal("CUDA", ordinal, count)?;
        let device = cu::device::get(ordinal as i32).map_err(|e| call("cuDeviceGet", e))?;
        let attr = |a: sys::CUdevice_attribute| -> Result<i32, DriverError> {
            // SAFETY: `device` came from cuDeviceGet.
            unsafe { cu::device::get_attribute(device, a) }
                .map_err(|e| call("cuDeviceGetAttribute", e))
        };
        use sys::CUdevice_attribute as A;
        let major = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        let pci = (
            attr(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
            attr(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
            attr(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?,
        );
        let info = DeviceInfo {
            ordinal,
            name: cu::device::get_name(device).map_err(|e| call("cuDeviceGetName", e))?,
            arch: format!("sm_{major}{minor}"),
            pci_address: Some(format!("{:04x}:{:02x}:{:02x}.0", pci.0, pci.1, pci.2)),
            // SAFETY: `device` came from cuDeviceGet.
            memory_bytes: unsafe { cu::device::total_mem(device) }
                .map_err(|e| call("cuDeviceTotalMem", e))? as u64,
            multiprocessors: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?.max(0) as u32,
        };
        // SAFETY: retains the device's primary context and makes it current on this thread.
        let ctx = unsafe { cu::primary_ctx::retain(device) }
            .map_err(|e| call("cuDevicePrimaryCtxRetain", e))?;
        let cuda = Cuda {
            device,
            ctx,
            math,
            dnn: None,
            compiler: Nvrtc,
        };
        cuda.bind()?;
        Ok((cuda, info))
    }
}

/// The file NVRTC is loaded from: the first of cudarc's names that loads, as cudarc tries
/// them.
pub fn nvrtc_location() -> Option<String> {
    cudarc::get_lib_name_candidates("nvrtc")
        .iter()
        .find_map(|name| crate::runtime::library_path::loaded_path(name))
        .map(|path| path.display().to_string())
}

/// The engine's kernels compiled by NVRTC for `arch` (`sm_89`, …) as the backend compiles
/// them, with no GPU or driver needed: the CUBIN and the compiler's version.
pub fn compile_kernels(arch: &str) -> Result<(Vec<u8>, String), DriverError> {
    guarded("NVRTC failed to load", || {
        // SAFETY: only opens the library by its candidate names.
        if !unsafe { rtc_sys::is_culib_present() } {
            return Err(DriverError::LibraryMissing(
                "NVRTC library (libnvrtc.so) not found".into(),
            ));
        }
        // SAFETY: found just now; `culib` opens it by the same names.
        let missing = missing_symbols!(unsafe { rtc_sys::culib() }, NVRTC_SYMBOLS);
        if !missing.is_empty() {
            return Err(DriverError::LibraryMissing(format!(
                "the NVRTC library lacks {}",
                missing.join(", ")
            )));
        }
        runtime_driver::compile_kernels(&Nvrtc, arch)
    })
}

impl KernelCompiler for Nvrtc {
    type Program = rtc_sys::nvrtcProgram;
    const DIALECT: Dialect = Dialect::Cuda;

    fn kernel_options(arch: &str) -> Vec<String> {
        vec![
            format!("--gpu-architecture={arch}"),
            "--std=c++17".to_string(),
            "-default-device".to_string(),
        ]
    }

    fn version(&self) -> String {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: writes two ints.
        let status = unsafe { rtc_sys::nvrtcVersion(&mut major, &mut minor) };
        if status == rtc_sys::nvrtcResult::NVRTC_SUCCESS {
            format!("nvrtc {major}.{minor}")
        } else {
            "nvrtc unknown".into()
        }
    }

    unsafe fn create_program(&self, source: &CStr) -> Result<Self::Program, DriverError> {
        rtc::create_program(source, Some(c"kernels.cu")).map_err(|e| call("nvrtcCreateProgram", e))
    }

    unsafe fn compile_program(&self, program: Self::Program, options: &[String]) -> bool {
        rtc::compile_program(program, options).is_ok()
    }

    unsafe fn program_log(&self, program: Self::Program) -> String {
        rtc::get_program_log(program)
            .map(|raw| {
                let bytes: Vec<u8> = raw
                    .iter()
                    .map(|&c| c as u8)
                    .take_while(|&b| b != 0)
                    .collect();
                String::from_utf8_lossy(&bytes).into_owned()
            })
            .unwrap_or_else(|e| format!("(no log: {e:?})"))
    }

    unsafe fn code_size(&self, program: Self::Program) -> Result<usize, DriverError> {
        let mut size = 0usize;
        rtc_check(
            "nvrtcGetCUBINSize",
            rtc_sys::nvrtcGetCUBINSize(program, &mut size),
        )?;
        Ok(size)
    }

    unsafe fn copy_code(
        &self,
        program: Self::Program,
        image: &mut [u8],
    ) -> Result<(), DriverError> {
        rtc_check(
            "nvrtcGetCUBIN",
            rtc_sys::nvrtcGetCUBIN(program, image.as_mut_ptr().cast()),
        )
    }

    unsafe fn destroy_program(&self, program: Self::Program) {
        let _ = rtc::destroy_program(program);
    }
}

/// cuBLAS's name for an element format.
fn data_type(precision: Precision) -> blas::cudaDataType {
    match precision {
        Precision::Fp32 => blas::cudaDataType::CUDA_R_32F,
        Precision::Fp16 => blas::cudaDataType::CUDA_R_16F,
        Precision::Bf16 => blas::cudaDataType::CUDA_R_16BF,
    }
}

fn operation(transpose: Transpose) -> blas::cublasOperation_t {
    match transpose {
        Transpose::No => blas::cublasOperation_t::CUBLAS_OP_N,
        Transpose::Yes => blas::cublasOperation_t::CUBLAS_OP_T,
    }
}

impl VendorRuntime for Cuda {
    type Stream = sys::CUstream;
    type Module = sys::CUmodule;
    type Function = sys::CUfunction;
    type Event = sys::CUevent;
    type Blas = blas::cublasHandle_t;
    type Compiler = Nvrtc;
    const RUNTIME: &'static str = "cuda";
    const LABEL: &'static str = "CUDA";

    fn bind(&self) -> Result<(), DriverError> {
        // SAFETY: the context is retained for the driver's lifetime.
        unsafe { cu::ctx::set_current(self.ctx) }.map_err(|e| call("cuCtxSetCurrent", e))
    }

    fn compiler(&self) -> &Nvrtc {
        &self.compiler
    }

    fn cache_version(&self) -> String {
        self.compiler.version()
    }

    fn dnn(&self) -> Option<&Dnn> {
        self.dnn.as_ref()
    }

    fn attach_stream(&mut self, stream: sys::CUstream) {
        if std::env::var_os("TINYPERF_CUDNN").is_some_and(|v| v == "0") {
            return;
        }
        match Dnn::open(stream.cast(), self.math == MathMode::Tf32) {
            Ok(dnn) => self.dnn = Some(dnn),
            Err(reason) => tracing::info!(%reason, "convolutions without cuDNN"),
        }
    }

    fn stream_pointer(stream: sys::CUstream) -> *mut c_void {
        stream.cast()
    }

    unsafe fn malloc(&self, bytes: usize) -> Result<Option<DevicePtr>, DriverError> {
        match cu::malloc_sync(bytes) {
            Ok(ptr) => Ok(Some(DevicePtr(ptr))),
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => Ok(None),
            Err(e) => Err(call("cuMemAlloc", e)),
        }
    }

    unsafe fn free(&self, ptr: DevicePtr) {
        let _ = cu::free_sync(ptr.0);
    }

    unsafe fn copy_to_device_async(
        &self,
        stream: sys::CUstream,
        dst: DevicePtr,
        src: *const u8,
        bytes: usize,
    ) -> Result<(), DriverError> {
        let src = std::slice::from_raw_parts(src, bytes);
        cu::memcpy_htod_async(dst.0, src, stream).map_err(|e| call("cuMemcpyHtoDAsync", e))
    }

    unsafe fn copy_to_host_async(
        &self,
        stream: sys::CUstream,
        dst: *mut u8,
        src: DevicePtr,
        bytes: usize,
    ) -> Result<(), DriverError> {
        let dst = std::slice::from_raw_parts_mut(dst, bytes);
        cu::memcpy_dtoh_async(dst, src.0, stream).map_err(|e| call("cuMemcpyDtoHAsync", e))
    }

    unsafe fn copy_on_device_async(
        &self,
        stream: sys::CUstream,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
    ) -> Result<(), DriverError> {
        cu::memcpy_dtod_async(dst.0, src.0, bytes, stream).map_err(|e| call("cuMemcpyDtoDAsync", e))
    }

    unsafe fn zero_async(
        &self,
        stream: sys::CUstream,
        dst: DevicePtr,
        bytes: usize,
    ) -> Result<(), DriverError> {
        cu::memset_d8_async(dst.0, 0, bytes, stream).map_err(|e| call("cuMemsetD8Async", e))
    }

    unsafe fn synchronize(&self, stream: sys::CUstream) -> Result<(), DriverError> {
        cu::stream::synchronize(stream).map_err(|e| call("cuStreamSynchronize", e))
    }

    fn create_stream(&self) -> Result<sys::CUstream, DriverError> {
        cu::stream::create(cu::stream::StreamKind::NonBlocking)
            .map_err(|e| call("cuStreamCreate", e))
    }

    unsafe fn destroy_stream(&self, stream: sys::CUstream) {
        let _ = cu::stream::destroy(stream);
    }

    unsafe fn load_module(&self, image: &[u8]) -> Result<sys::CUmodule, DriverError> {
        cu::module::load_data(image.as_ptr().cast()).map_err(|e| call("cuModuleLoadData", e))
    }

    unsafe fn unload_module(&self, module: sys::CUmodule) {
        let _ = cu::module::unload(module);
    }

    unsafe fn function(&self, module: sys::CUmodule, name: &CStr) -> Option<sys::CUfunction> {
        cu::module::get_function(module, name.to_owned()).ok()
    }

    unsafe fn launch(
        &self,
        stream: sys::CUstream,
        function: sys::CUfunction,
        shape: LaunchShape,
        args: &mut [*mut c_void],
    ) -> Result<(), DriverError> {
        cu::launch_kernel(function, shape.grid, shape.block, 0, stream, args)
            .map_err(|e| call("cuLaunchKernel", e))
    }

    unsafe fn create_blas(
        &self,
        stream: sys::CUstream,
    ) -> Result<blas::cublasHandle_t, DriverError> {
        let mut handle: blas::cublasHandle_t = std::ptr::null_mut();
        blas_check("cublasCreate", blas::cublasCreate_v2(&mut handle))?;
        blas_check(
            "cublasSetStream",
            blas::cublasSetStream_v2(handle, stream as _),
        )?;
        // The strict handle also keeps 16-bit GEMMs from reducing split-K partial sums in
        // 16 bits, so their outputs are rounded once, as the CPU reference's are.
        let mode = match self.math {
            MathMode::Strict => {
                blas::cublasMath_t::CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION
            }
            MathMode::Tf32 => blas::cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH,
        };
        blas_check("cublasSetMathMode", blas::cublasSetMathMode(handle, mode))?;
        Ok(handle)
    }

    unsafe fn destroy_blas(&self, handle: blas::cublasHandle_t) {
        let _ = blas::cublasDestroy_v2(handle);
    }

    unsafe fn sgemm(
        &self,
        handle: blas::cublasHandle_t,
        cm: &ColumnMajorGemm,
        alpha: f32,
        beta: f32,
    ) -> Result<(), DriverError> {
        let status = blas_sgemm!(blas::cublasSgemm_v2, handle, operation, cm, alpha, beta);
        blas_check("cublasSgemm", status)
    }

    unsafe fn gemm_ex(
        &self,
        handle: blas::cublasHandle_t,
        cm: &ColumnMajorGemm,
        alpha: f32,
        beta: f32,
        types: GemmTypes,
        fast_f32: bool,
    ) -> Result<(), DriverError> {
        let compute = if fast_f32 && self.math == MathMode::Tf32 {
            blas::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32
        } else {
            blas::cublasComputeType_t::CUBLAS_COMPUTE_32F
        };
        let status = blas_gemm_ex!(
            blas::cublasGemmEx,
            handle,
            operation,
            cm,
            alpha,
            beta,
            data_type(types.operands),
            data_type(types.output),
            compute,
            blas::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        );
        blas_check("cublasGemmEx", status)
    }

    fn create_event(&self) -> Result<sys::CUevent, DriverError> {
        cu::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
            .map_err(|e| call("cuEventCreate", e))
    }

    unsafe fn record_event(
        &self,
        event: sys::CUevent,
        stream: sys::CUstream,
    ) -> Result<(), DriverError> {
        cu::event::record(event, stream).map_err(|e| call("cuEventRecord", e))
    }

    unsafe fn synchronize_event(&self, event: sys::CUevent) -> Result<(), DriverError> {
        cu::event::synchronize(event).map_err(|e| call("cuEventSynchronize", e))
    }

    unsafe fn elapsed_ms(
        &self,
        start: sys::CUevent,
        end: sys::CUevent,
    ) -> Result<f32, DriverError> {
        cu::event::elapsed(start, end).map_err(|e| call("cuEventElapsedTime", e))
    }

    unsafe fn destroy_event(&self, event: sys::CUevent) {
        let _ = cu::event::destroy(event);
    }

    fn alloc_pinned(&self, bytes: usize) -> Result<*mut u8, DriverError> {
        // SAFETY: a page-locked host allocation, freed by `free_pinned`.
        unsafe { cu::malloc_host(bytes, 0) }
            .map(|p| p.cast())
            .map_err(|e| call("cuMemHostAlloc", e))
    }

    unsafe fn free_pinned(&self, ptr: *mut u8) {
        let _ = cu::free_host(ptr.cast());
    }

    fn can_access_peer(&self, peer: &Cuda) -> bool {
        let mut can = 0;
        // SAFETY: writes one int; both devices came from cuDeviceGet.
        unsafe { sys::cuDeviceCanAccessPeer(&mut can, self.device, peer.device) };
        can == 1
    }

    fn enable_peer_access(&self, peer: &Cuda) {
        // SAFETY: both contexts are retained.
        unsafe { sys::cuCtxEnablePeerAccess(peer.ctx, 0) };
    }

    unsafe fn copy_to_peer_async(
        &self,
        stream: sys::CUstream,
        peer: &Cuda,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
    ) -> Result<(), DriverError> {
        cu::memcpy_peer_async(peer.ctx, dst.0, self.ctx, src.0, bytes, stream)
            .map_err(|e| call("cuMemcpyPeerAsync", e))
    }

    unsafe fn detach_stream(&self) {
        if let Some(dnn) = &self.dnn {
            dnn.close(&|ptr| {
                let _ = cu::free_sync(ptr.0);
            });
        }
    }

    unsafe fn release(&self) {
        let _ = cu::primary_ctx::release(self.device);
    }
}
