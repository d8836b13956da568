//! The CUDA driver: the driver API, NVRTC and cuBLAS through cudarc, every library opened
//! at run time. cudarc panics when a library or symbol is missing, so `open` checks the
//! libraries and every symbol this file calls before the first call, and runs inside a
//! panic guard as a second line.

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::{Mutex, PoisonError};

use cudarc::cublas::sys as blas;
use cudarc::driver::result as cu;
use cudarc::driver::sys;
use cudarc::nvrtc::{result as rtc, sys as rtc_sys};

use super::cache::{CacheKey, KernelCache};
use super::cudnn::Dnn;
use super::driver::DnnConv;
use super::driver::{
    DeviceInfo, DevicePtr, DriverError, Gemm, GpuDriver, KernelArg, LaunchShape, MatmulPrecision,
    Transpose,
};
use super::source::{self, Dialect, KERNEL_NAMES};
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

/// Raw handles of one device's context, stream, module and BLAS handle.
struct Handles {
    ctx: sys::CUcontext,
    stream: sys::CUstream,
    module: sys::CUmodule,
    functions: HashMap<&'static str, sys::CUfunction>,
    blas: blas::cublasHandle_t,
}

// SAFETY: driver-API handles may be used from any thread once their context is current,
// which every call below makes it first; the cuBLAS handle is only used under `gemm_lock`.
unsafe impl Send for Handles {}
unsafe impl Sync for Handles {}

pub struct CudaDriver {
    info: DeviceInfo,
    device: sys::CUdevice,
    handles: Handles,
    gemm_lock: Mutex<()>,
    math: MathMode,
    /// cuDNN for convolutions, when it loads (and `TINYPERF_CUDNN` is not `0`).
    dnn: Option<Dnn>,
}

impl std::fmt::Debug for CudaDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaDriver")
            .field("info", &self.info)
            .finish()
    }
}

fn call(name: &'static str, error: impl std::fmt::Debug) -> DriverError {
    DriverError::Call {
        call: name,
        message: format!("{error:?}"),
    }
}

fn blas_check(name: &'static str, status: blas::cublasStatus_t) -> Result<(), DriverError> {
    if status == blas::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(call(name, status))
    }
}

/// Whether the three CUDA libraries the backend needs can be opened, and which symbols
/// any of them lacks; `Err` names what is missing.
pub fn check_libraries() -> Result<(), DriverError> {
    crate::runtime::guard::catch(|| {
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
    .unwrap_or_else(|panic| {
        Err(DriverError::LibraryMissing(format!(
            "CUDA libraries failed to load: {panic}"
        )))
    })
}

/// Number of CUDA devices, or why there are none to use.
pub fn device_count() -> Result<usize, DriverError> {
    check_libraries()?;
    crate::runtime::guard::catch(|| {
        cu::init().map_err(|e| call("cuInit", e))?;
        cu::device::get_count()
            .map(|n| n.max(0) as usize)
            .map_err(|e| call("cuDeviceGetCount", e))
    })
    .unwrap_or_else(|panic| Err(DriverError::LibraryMissing(panic)))
}

impl CudaDriver {
    /// Opens device `ordinal`: its primary context, a stream of its own, the engine's
    /// kernels (from the cache or compiled now) and a cuBLAS handle.
    pub fn open(ordinal: usize, cache: &KernelCache, math: MathMode) -> Result<Self, DriverError> {
        check_libraries()?;
        crate::runtime::guard::catch(|| Self::open_checked(ordinal, cache, math)).unwrap_or_else(
            |panic| Err(DriverError::LibraryMissing(format!("CUDA failed: {panic}"))),
        )
    }

    fn open_checked(
        ordinal: usize,
        cache: &KernelCache,
        math: MathMode,
    ) -> Result<Self, DriverError> {
        cu::init().map_err(|e| call("cuInit", e))?;
        let count = cu::device::get_count()
            .map_err(|e| call("cuDeviceGetCount", e))?
            .max(0) as usize;
        if ordinal >= count {
            return Err(DriverError::NoDevice {
                runtime: "CUDA",
                ordinal,
                count,
            });
        }
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
        unsafe { cu::ctx::set_current(ctx) }.map_err(|e| call("cuCtxSetCurrent", e))?;
        let stream = cu::stream::create(cu::stream::StreamKind::NonBlocking)
            .map_err(|e| call("cuStreamCreate", e))?;
        let module = load_module(&info.arch, cache)?;
        let mut functions = HashMap::new();
        for &name in KERNEL_NAMES {
            let c_name = CString::new(name).map_err(|e| call("kernel name", e))?;
            // SAFETY: `module` is loaded and stays loaded as long as the driver.
            let function = unsafe { cu::module::get_function(module, c_name) }
                .map_err(|_| DriverError::UnknownKernel(name.to_string()))?;
            functions.insert(name, function);
        }
        let mut handle: blas::cublasHandle_t = std::ptr::null_mut();
        // SAFETY: writes one handle; the stream belongs to the current context.
        unsafe {
            blas_check("cublasCreate", blas::cublasCreate_v2(&mut handle))?;
            blas_check(
                "cublasSetStream",
                blas::cublasSetStream_v2(handle, stream as _),
            )?;
            // The strict handle also keeps 16-bit GEMMs from reducing split-K partial sums
            // in 16 bits, so their outputs are rounded once, as the CPU reference's are.
            let mode = match math {
                MathMode::Strict => {
                    blas::cublasMath_t::CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION
                }
                MathMode::Tf32 => blas::cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH,
            };
            blas_check("cublasSetMathMode", blas::cublasSetMathMode(handle, mode))?;
        }
        Ok(CudaDriver {
            info,
            device,
            handles: Handles {
                ctx,
                stream,
                module,
                functions,
                blas: handle,
            },
            gemm_lock: Mutex::new(()),
            math,
            dnn: open_dnn(stream, math),
        })
    }

    fn bind(&self) -> Result<(), DriverError> {
        // SAFETY: the context is retained for the driver's lifetime.
        unsafe { cu::ctx::set_current(self.handles.ctx) }.map_err(|e| call("cuCtxSetCurrent", e))
    }
}

fn open_dnn(stream: sys::CUstream, math: MathMode) -> Option<Dnn> {
    if std::env::var_os("TINYPERF_CUDNN").is_some_and(|v| v == "0") {
        return None;
    }
    match Dnn::open(stream.cast(), math == MathMode::Tf32) {
        Ok(dnn) => Some(dnn),
        Err(reason) => {
            tracing::info!(%reason, "convolutions without cuDNN");
            None
        }
    }
}

fn as_cuda(peer: &dyn GpuDriver) -> Result<&CudaDriver, DriverError> {
    peer.as_any()
        .downcast_ref::<CudaDriver>()
        .ok_or_else(|| DriverError::InvalidArgument("peer is not a CUDA device".into()))
}

/// The engine's kernels for `arch`, from the cache when a loadable image is there,
/// otherwise compiled by NVRTC to a CUBIN and cached.
fn load_module(arch: &str, cache: &KernelCache) -> Result<sys::CUmodule, DriverError> {
    let source = source::assemble(Dialect::Cuda);
    let version = nvrtc_version();
    let options = kernel_options(arch);
    let key = CacheKey {
        runtime: "cuda",
        arch,
        compiler_version: &version,
        options: &options,
        source: &source,
    };
    if let Some(image) = cache.load(&key) {
        match load_image(&image) {
            Ok(module) => return Ok(module),
            Err(error) => {
                tracing::warn!(%error, "cached CUDA kernels did not load; compiling again");
                cache.evict(&key);
            }
        }
    }
    let image = compile(&source, arch, &options)?;
    let module = load_image(&image)?;
    cache.store(&key, &image);
    Ok(module)
}

fn kernel_options(arch: &str) -> Vec<String> {
    vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".to_string(),
        "-default-device".to_string(),
    ]
}

/// The engine's kernels compiled by NVRTC for `arch` (`sm_89`, …) as the backend compiles
/// them, with no GPU or driver needed: the CUBIN and the compiler's version.
pub fn compile_kernels(arch: &str) -> Result<(Vec<u8>, String), DriverError> {
    crate::runtime::guard::catch(|| {
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
        let image = compile(
            &source::assemble(Dialect::Cuda),
            arch,
            &kernel_options(arch),
        )?;
        Ok((image, nvrtc_version()))
    })
    .unwrap_or_else(|panic| {
        Err(DriverError::LibraryMissing(format!(
            "NVRTC failed to load: {panic}"
        )))
    })
}

fn load_image(image: &[u8]) -> Result<sys::CUmodule, DriverError> {
    // SAFETY: the image is a complete CUBIN; the driver copies what it needs.
    unsafe { cu::module::load_data(image.as_ptr().cast()) }.map_err(|e| call("cuModuleLoadData", e))
}

/// The file NVRTC is loaded from: the first of cudarc's names that loads, as cudarc tries
/// them.
pub fn nvrtc_location() -> Option<String> {
    cudarc::get_lib_name_candidates("nvrtc")
        .iter()
        .find_map(|name| crate::runtime::library_path::loaded_path(name))
        .map(|path| path.display().to_string())
}

fn nvrtc_version() -> String {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: writes two ints.
    let status = unsafe { rtc_sys::nvrtcVersion(&mut major, &mut minor) };
    if status == rtc_sys::nvrtcResult::NVRTC_SUCCESS {
        format!("nvrtc {major}.{minor}")
    } else {
        "nvrtc unknown".into()
    }
}

fn compile(source: &str, arch: &str, options: &[String]) -> Result<Vec<u8>, DriverError> {
    let compile_error = |log: String| DriverError::Compile {
        arch: arch.to_string(),
        log,
    };
    let c_source = CString::new(source).map_err(|e| compile_error(e.to_string()))?;
    let program = rtc::create_program(&c_source, Some(c"kernels.cu"))
        .map_err(|e| call("nvrtcCreateProgram", e))?;
    // SAFETY: `program` is live until destroyed at the end of this function.
    let result = unsafe {
        match rtc::compile_program(program, options) {
            Ok(()) => cubin(program),
            Err(_) => {
                let log = rtc::get_program_log(program)
                    .map(|raw| {
                        let bytes: Vec<u8> = raw
                            .iter()
                            .map(|&c| c as u8)
                            .take_while(|&b| b != 0)
                            .collect();
                        String::from_utf8_lossy(&bytes).into_owned()
                    })
                    .unwrap_or_else(|e| format!("(no log: {e:?})"));
                Err(compile_error(log))
            }
        }
    };
    // SAFETY: created above and not used after this.
    let _ = unsafe { rtc::destroy_program(program) };
    result
}

/// # Safety
/// `program` was compiled successfully and is still live.
unsafe fn cubin(program: rtc_sys::nvrtcProgram) -> Result<Vec<u8>, DriverError> {
    let mut size = 0usize;
    let status = rtc_sys::nvrtcGetCUBINSize(program, &mut size);
    if status != rtc_sys::nvrtcResult::NVRTC_SUCCESS || size == 0 {
        return Err(call("nvrtcGetCUBINSize", status));
    }
    let mut image = vec![0u8; size];
    let status = rtc_sys::nvrtcGetCUBIN(program, image.as_mut_ptr().cast());
    if status != rtc_sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(call("nvrtcGetCUBIN", status));
    }
    Ok(image)
}

impl GpuDriver for CudaDriver {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn native_stream(&self) -> *mut c_void {
        self.handles.stream.cast()
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn runtime(&self) -> &'static str {
        "cuda"
    }

    fn alloc(&self, bytes: usize) -> Result<DevicePtr, DriverError> {
        self.bind()?;
        // SAFETY: a plain device allocation in the current context.
        match unsafe { cu::malloc_sync(bytes.max(1)) } {
            Ok(ptr) => Ok(DevicePtr(ptr)),
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                Err(DriverError::OutOfMemory { bytes })
            }
            Err(e) => Err(call("cuMemAlloc", e)),
        }
    }

    unsafe fn free(&self, ptr: DevicePtr) {
        if self.bind().is_ok() {
            let _ = cu::free_sync(ptr.0);
        }
    }

    fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<(), DriverError> {
        self.bind()?;
        // SAFETY: `dst` holds at least `src.len()` bytes (the backend checks lengths); the
        // stream is drained before returning, so `src` outlives the copy.
        unsafe {
            cu::memcpy_htod_async(dst.0, src, self.handles.stream)
                .map_err(|e| call("cuMemcpyHtoDAsync", e))?;
        }
        self.synchronize()
    }

    fn copy_to_host(&self, dst: &mut [u8], src: DevicePtr) -> Result<(), DriverError> {
        self.bind()?;
        // SAFETY: as above, and the stream is drained before `dst` is read.
        unsafe {
            cu::memcpy_dtoh_async(dst, src.0, self.handles.stream)
                .map_err(|e| call("cuMemcpyDtoHAsync", e))?;
        }
        self.synchronize()
    }

    fn copy_on_device(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
    ) -> Result<(), DriverError> {
        self.bind()?;
        // SAFETY: both ranges are live allocations of at least `bytes`.
        unsafe { cu::memcpy_dtod_async(dst.0, src.0, bytes, self.handles.stream) }
            .map_err(|e| call("cuMemcpyDtoDAsync", e))
    }

    fn zero(&self, dst: DevicePtr, bytes: usize) -> Result<(), DriverError> {
        self.bind()?;
        // SAFETY: `dst` is a live allocation of at least `bytes`.
        unsafe { cu::memset_d8_async(dst.0, 0, bytes, self.handles.stream) }
            .map_err(|e| call("cuMemsetD8Async", e))
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
        self.bind()?;
        let mut slots = super::driver::argument_slots(args);
        let mut pointers: Vec<*mut c_void> =
            slots.iter_mut().map(|s| s.as_mut_ptr().cast()).collect();
        // SAFETY: the arguments match the kernel's C signature (the backend passes them in
        // declaration order with the declared types), and `slots` outlives the call, which
        // copies them.
        unsafe {
            cu::launch_kernel(
                function,
                shape.grid,
                shape.block,
                0,
                self.handles.stream,
                &mut pointers,
            )
        }
        .map_err(|e| call("cuLaunchKernel", format!("{kernel}: {e:?}")))
    }

    fn gemm(&self, g: &Gemm) -> Result<(), DriverError> {
        g.validate()?;
        if g.m == 0 || g.n == 0 {
            return Ok(());
        }
        self.bind()?;
        let cm = g.column_major();
        let op = |t: Transpose| match t {
            Transpose::No => blas::cublasOperation_t::CUBLAS_OP_N,
            Transpose::Yes => blas::cublasOperation_t::CUBLAS_OP_T,
        };
        let _guard = self
            .gemm_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !g.types.is_f32() {
            let data_type = |p: Precision| match p {
                Precision::Fp32 => blas::cudaDataType::CUDA_R_32F,
                Precision::Fp16 => blas::cudaDataType::CUDA_R_16F,
                Precision::Bf16 => blas::cudaDataType::CUDA_R_16BF,
            };
            let operands = data_type(g.types.operands);
            // SAFETY: as below, with elements of the formats the call names.
            let status = unsafe {
                blas::cublasGemmEx(
                    self.handles.blas,
                    op(cm.trans_first),
                    op(cm.trans_second),
                    cm.m as i32,
                    cm.n as i32,
                    cm.k as i32,
                    (&g.alpha as *const f32).cast(),
                    cm.first.0 as *const c_void,
                    operands,
                    cm.ld_first as i32,
                    cm.second.0 as *const c_void,
                    operands,
                    cm.ld_second as i32,
                    (&g.beta as *const f32).cast(),
                    cm.c.0 as *mut c_void,
                    data_type(g.types.output),
                    cm.ldc as i32,
                    blas::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    blas::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            };
            return blas_check("cublasGemmEx", status);
        }
        // SAFETY: the shapes were validated against the leading dimensions; the pointers are
        // live allocations the backend sized for them.
        let status = unsafe {
            blas::cublasSgemm_v2(
                self.handles.blas,
                op(cm.trans_first),
                op(cm.trans_second),
                cm.m as i32,
                cm.n as i32,
                cm.k as i32,
                &g.alpha,
                cm.first.0 as *const f32,
                cm.ld_first as i32,
                cm.second.0 as *const f32,
                cm.ld_second as i32,
                &g.beta,
                cm.c.0 as *mut f32,
                cm.ldc as i32,
            )
        };
        blas_check("cublasSgemm", status)
    }

    fn synchronize(&self) -> Result<(), DriverError> {
        self.bind()?;
        // SAFETY: the stream lives as long as the driver.
        unsafe { cu::stream::synchronize(self.handles.stream) }
            .map_err(|e| call("cuStreamSynchronize", e))
    }

    fn dnn_library(&self) -> Option<String> {
        self.dnn.as_ref().map(|d| d.version.clone())
    }

    fn dnn_conv(&self, conv: &DnnConv) -> Result<bool, DriverError> {
        let Some(dnn) = &self.dnn else {
            return Ok(false);
        };
        self.bind()?;
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
        self.bind()?;
        // SAFETY: a page-locked host allocation, freed by `free_pinned`.
        unsafe { cu::malloc_host(bytes.max(1), 0) }
            .map(|p| p.cast())
            .map_err(|e| call("cuMemHostAlloc", e))
    }

    unsafe fn free_pinned(&self, ptr: *mut u8) {
        let _ = cu::free_host(ptr.cast());
    }

    unsafe fn copy_async(
        &self,
        to_device: bool,
        host: *mut u8,
        device: DevicePtr,
        bytes: usize,
    ) -> Result<(), DriverError> {
        self.bind()?;
        let host = std::slice::from_raw_parts_mut(host, bytes);
        if to_device {
            cu::memcpy_htod_async(device.0, host, self.handles.stream)
        } else {
            cu::memcpy_dtoh_async(host, device.0, self.handles.stream)
        }
        .map_err(|e| call("cuMemcpyAsync", e))
    }

    fn enable_peer_access(&self, peer: &dyn GpuDriver) -> Result<(), DriverError> {
        let peer = as_cuda(peer)?;
        self.bind()?;
        let mut can = 0;
        // SAFETY: writes one int; both devices came from cuDeviceGet.
        unsafe { sys::cuDeviceCanAccessPeer(&mut can, self.device, peer.device) };
        if can == 1 {
            // SAFETY: both contexts are retained; "already enabled" is not a failure.
            unsafe { sys::cuCtxEnablePeerAccess(peer.handles.ctx, 0) };
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
        let peer = as_cuda(peer)?;
        self.bind()?;
        // SAFETY: both ranges hold `bytes` in their own contexts.
        unsafe {
            cu::memcpy_peer_async(
                peer.handles.ctx,
                dst.0,
                self.handles.ctx,
                src.0,
                bytes,
                self.handles.stream,
            )
        }
        .map_err(|e| call("cuMemcpyPeerAsync", e))
    }

    fn matmul_square(
        &self,
        precision: MatmulPrecision,
        n: usize,
        a: DevicePtr,
        b: DevicePtr,
        c: DevicePtr,
    ) -> Result<(), DriverError> {
        self.bind()?;
        let (dtype, compute) = match (precision, self.math) {
            (MatmulPrecision::F16, _) => (
                blas::cudaDataType::CUDA_R_16F,
                blas::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            ),
            (MatmulPrecision::F32, MathMode::Tf32) => (
                blas::cudaDataType::CUDA_R_32F,
                blas::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
            ),
            (MatmulPrecision::F32, MathMode::Strict) => (
                blas::cudaDataType::CUDA_R_32F,
                blas::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            ),
        };
        let n = i32::try_from(n)
            .map_err(|_| DriverError::InvalidArgument(format!("matmul size {n}")))?;
        let (alpha, beta) = (1.0f32, 0.0f32);
        let _guard = self
            .gemm_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // SAFETY: the caller's pointers hold n×n elements of the types the call names.
        let status = unsafe {
            blas::cublasGemmEx(
                self.handles.blas,
                blas::cublasOperation_t::CUBLAS_OP_N,
                blas::cublasOperation_t::CUBLAS_OP_N,
                n,
                n,
                n,
                (&alpha as *const f32).cast(),
                a.0 as *const c_void,
                dtype,
                n,
                b.0 as *const c_void,
                dtype,
                n,
                (&beta as *const f32).cast(),
                c.0 as *mut c_void,
                blas::cudaDataType::CUDA_R_32F,
                n,
                compute,
                blas::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        };
        blas_check("cublasGemmEx", status)
    }

    fn time_ms(
        &self,
        work: &mut dyn FnMut() -> Result<(), DriverError>,
    ) -> Result<f64, DriverError> {
        self.bind()?;
        let start = cu::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
            .map_err(|e| call("cuEventCreate", e))?;
        let end = cu::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
            .map_err(|e| call("cuEventCreate", e))?;
        // SAFETY: both events and the stream are live until destroyed below.
        let result = unsafe {
            (|| {
                cu::event::record(start, self.handles.stream)
                    .map_err(|e| call("cuEventRecord", e))?;
                work()?;
                cu::event::record(end, self.handles.stream)
                    .map_err(|e| call("cuEventRecord", e))?;
                cu::event::synchronize(end).map_err(|e| call("cuEventSynchronize", e))?;
                cu::event::elapsed(start, end)
                    .map(|ms| ms as f64)
                    .map_err(|e| call("cuEventElapsedTime", e))
            })()
        };
        // SAFETY: recorded work has completed or failed; nothing waits on the events.
        unsafe {
            let _ = cu::event::destroy(start);
            let _ = cu::event::destroy(end);
        }
        result
    }
}

impl Drop for CudaDriver {
    fn drop(&mut self) {
        if self.bind().is_err() {
            return;
        }
        // SAFETY: nothing uses the handles after the driver is dropped; the stream is
        // drained first so no queued work refers to them.
        unsafe {
            let _ = cu::stream::synchronize(self.handles.stream);
            if let Some(dnn) = &self.dnn {
                dnn.close(&|ptr| {
                    let _ = cu::free_sync(ptr.0);
                });
            }
            let _ = blas::cublasDestroy_v2(self.handles.blas);
            let _ = cu::module::unload(self.handles.module);
            let _ = cu::stream::destroy(self.handles.stream);
            let _ = cu::primary_ctx::release(self.device);
        }
    }
}
