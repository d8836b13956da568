//! The HIP calls under the shared [`RuntimeDriver`]: the HIP runtime, hiprtc and rocBLAS of
//! whichever ROCm is installed (5.7 or 6.x, opened by [`crate::runtime::rocm`]), every
//! library opened at run time with every entry point resolved before the first call. The
//! kernels are the CUDA driver's source under the HIP prelude.

use std::ffi::{c_void, CStr, CString};

use crate::runtime::rocm::api::{self as rocm_api, HipResult, RocblasDatatype, RocblasStatus};
use crate::runtime::rocm::{self, Hiprtc, LoadError, Rocblas};

use super::cache::KernelCache;
use super::driver::{
    ColumnMajorGemm, DeviceInfo, DevicePtr, DriverError, GemmTypes, LaunchShape, Transpose,
};
use super::runtime_driver::{
    self, blas_gemm_ex, blas_sgemm, call_error as call, check_ordinal, guarded, KernelCompiler,
    RuntimeDriver, VendorRuntime,
};
use super::source::Dialect;
use crate::engine::Precision;

/// `hipStreamNonBlocking`: the stream does not wait on the legacy default stream.
const STREAM_NON_BLOCKING: u32 = 1;

/// The HIP driver: one device's stream, kernels and rocBLAS handle.
pub type HipDriver = RuntimeDriver<Hip>;

/// The HIP side of a [`HipDriver`]: the device's ordinal and the ROCm libraries' entry
/// points.
pub struct Hip {
    ordinal: i32,
    hip: &'static rocm::Hip,
    blas: &'static Rocblas,
    compiler: HipCompiler<'static>,
}

/// hiprtc, with the HIP runtime whose version names the ROCm it came with.
pub struct HipCompiler<'a> {
    rtc: &'a Hiprtc,
}

/// A HIP call's result as the driver's error.
fn hip_check(name: &'static str, result: HipResult) -> Result<(), DriverError> {
    if result == rocm_api::HIP_SUCCESS {
        Ok(())
    } else {
        Err(call(name, format!("hipError_t {result}")))
    }
}

fn blas_check(name: &'static str, status: RocblasStatus) -> Result<(), DriverError> {
    if status == rocm_api::ROCBLAS_SUCCESS {
        Ok(())
    } else {
        Err(call(name, format!("rocblas_status {status}")))
    }
}

fn rtc_check(name: &'static str, answer: rocm_api::HiprtcResult) -> Result<(), DriverError> {
    match answer {
        rocm_api::HIPRTC_SUCCESS => Ok(()),
        failed => Err(call(name, format!("hiprtcResult {failed}"))),
    }
}

fn missing(error: LoadError) -> DriverError {
    DriverError::LibraryMissing(error.to_string())
}

/// The HIP runtime, hiprtc and rocBLAS with every entry point used here, or why not.
pub fn check_libraries(
) -> Result<(&'static rocm::Hip, &'static Hiprtc, &'static Rocblas), DriverError> {
    Ok((
        rocm::hip().map_err(missing)?,
        rocm::hiprtc().map_err(missing)?,
        rocm::rocblas().map_err(missing)?,
    ))
}

/// Number of HIP devices, or why there are none to use.
pub fn device_count() -> Result<usize, DriverError> {
    let (hip, _, _) = check_libraries()?;
    // SAFETY: entry points resolved at open.
    hip_check("hipInit", unsafe { (hip.api.hipInit)(0) })?;
    let mut count = 0;
    // SAFETY: writes one int.
    hip_check("hipGetDeviceCount", unsafe {
        (hip.api.hipGetDeviceCount)(&mut count)
    })?;
    Ok(count.max(0) as usize)
}

impl RuntimeDriver<Hip> {
    /// Opens device `ordinal`: a stream of its own, the engine's kernels (from the cache
    /// or compiled now) and a rocBLAS handle.
    pub fn open(ordinal: usize, cache: &KernelCache) -> Result<Self, DriverError> {
        let (hip, rtc, blas) = check_libraries()?;
        guarded("HIP failed", || {
            let count = device_count()?;
            check_ordinal("HIP", ordinal, count)?;
            let vendor = Hip {
                ordinal: ordinal as i32,
                hip,
                blas,
                compiler: HipCompiler { rtc },
            };
            vendor.bind()?;
            let props = hip
                .properties
                .get(vendor.ordinal)
                .map_err(|e| call(hip.properties.layout(), format!("hipError_t {e}")))?;
            let info = DeviceInfo {
                ordinal,
                name: props.name,
                arch: props.gfx_target,
                pci_address: Some(props.pci_address),
                memory_bytes: props.total_memory_bytes,
                multiprocessors: props.multiprocessors,
            };
            RuntimeDriver::start(vendor, info, cache)
        })
    }
}

/// `hiprtc 5.7`: part of the kernel cache's key, so another ROCm compiles afresh.
pub fn hiprtc_version(rtc: &Hiprtc) -> String {
    HipCompiler { rtc }.version()
}

/// The file hiprtc was loaded from (its own library, or the HIP runtime before ROCm 6).
pub fn hiprtc_location() -> Option<String> {
    rocm::hiprtc().ok().map(|rtc| rtc.location.clone())
}

/// The engine's kernels compiled by hiprtc for `arch` (`gfx1100`, …) as the backend
/// compiles them, with no GPU needed: the code object and the compiler's version.
pub fn compile_kernels(arch: &str) -> Result<(Vec<u8>, String), DriverError> {
    let rtc = rocm::hiprtc().map_err(missing)?;
    guarded("hiprtc failed", || {
        runtime_driver::compile_kernels(&HipCompiler { rtc }, arch)
    })
}

impl KernelCompiler for HipCompiler<'_> {
    type Program = rocm_api::Program;
    const DIALECT: Dialect = Dialect::Hip;

    fn kernel_options(arch: &str) -> Vec<String> {
        vec![format!("--offload-arch={arch}"), "-O3".to_string()]
    }

    fn version(&self) -> String {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: writes two ints.
        let answer = unsafe { (self.rtc.api.hiprtcVersion)(&mut major, &mut minor) };
        if answer == rocm_api::HIPRTC_SUCCESS {
            format!("hiprtc {major}.{minor}")
        } else {
            "hiprtc unknown".into()
        }
    }

    unsafe fn create_program(&self, source: &CStr) -> Result<rocm_api::Program, DriverError> {
        let mut program: rocm_api::Program = std::ptr::null_mut();
        // No headers are passed.
        let answer = (self.rtc.api.hiprtcCreateProgram)(
            &mut program,
            source.as_ptr(),
            c"kernels.cu".as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        );
        rtc_check("hiprtcCreateProgram", answer)?;
        Ok(program)
    }

    unsafe fn compile_program(&self, program: rocm_api::Program, options: &[String]) -> bool {
        let Ok(c_options) = options
            .iter()
            .map(|o| CString::new(o.as_str()))
            .collect::<Result<Vec<CString>, _>>()
        else {
            return false;
        };
        let pointers: Vec<*const std::ffi::c_char> = c_options.iter().map(|o| o.as_ptr()).collect();
        let compiled =
            (self.rtc.api.hiprtcCompileProgram)(program, pointers.len() as i32, pointers.as_ptr());
        compiled == rocm_api::HIPRTC_SUCCESS
    }

    unsafe fn program_log(&self, program: rocm_api::Program) -> String {
        let api = &self.rtc.api;
        let mut size = 0usize;
        if (api.hiprtcGetProgramLogSize)(program, &mut size) != rocm_api::HIPRTC_SUCCESS {
            return "(no log)".into();
        }
        let mut log = vec![0u8; size.max(1)];
        if (api.hiprtcGetProgramLog)(program, log.as_mut_ptr().cast()) != rocm_api::HIPRTC_SUCCESS {
            return "(no log)".into();
        }
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        String::from_utf8_lossy(&log[..end]).into_owned()
    }

    unsafe fn code_size(&self, program: rocm_api::Program) -> Result<usize, DriverError> {
        let mut size = 0usize;
        rtc_check(
            "hiprtcGetCodeSize",
            (self.rtc.api.hiprtcGetCodeSize)(program, &mut size),
        )?;
        Ok(size)
    }

    unsafe fn copy_code(
        &self,
        program: rocm_api::Program,
        image: &mut [u8],
    ) -> Result<(), DriverError> {
        let answer = (self.rtc.api.hiprtcGetCode)(program, image.as_mut_ptr().cast());
        rtc_check("hiprtcGetCode", answer)
    }

    unsafe fn destroy_program(&self, program: rocm_api::Program) {
        let mut program = program;
        let _ = (self.rtc.api.hiprtcDestroyProgram)(&mut program);
    }
}

/// The rocBLAS format of a 16-bit or f32 operand.
fn blas_type(precision: Precision) -> RocblasDatatype {
    match precision {
        Precision::Fp32 => rocm_api::ROCBLAS_F32,
        Precision::Fp16 => rocm_api::ROCBLAS_F16,
        Precision::Bf16 => rocm_api::ROCBLAS_BF16,
    }
}

fn blas_operation(transpose: Transpose) -> rocm_api::RocblasOperation {
    match transpose {
        Transpose::No => rocm_api::ROCBLAS_OPERATION_NONE,
        Transpose::Yes => rocm_api::ROCBLAS_OPERATION_TRANSPOSE,
    }
}

impl VendorRuntime for Hip {
    type Stream = rocm_api::Stream;
    type Module = rocm_api::Module;
    type Function = rocm_api::Function;
    type Event = rocm_api::Event;
    type Blas = rocm_api::RocblasHandle;
    type Compiler = HipCompiler<'static>;
    const RUNTIME: &'static str = "hip";
    const LABEL: &'static str = "HIP";

    fn bind(&self) -> Result<(), DriverError> {
        // SAFETY: entry points resolved at open.
        hip_check("hipSetDevice", unsafe {
            (self.hip.api.hipSetDevice)(self.ordinal)
        })
    }

    fn compiler(&self) -> &HipCompiler<'static> {
        &self.compiler
    }

    fn cache_version(&self) -> String {
        // hiprtc's own version does not move with every ROCm release; the runtime's does.
        let mut runtime_version = 0;
        // SAFETY: writes one int.
        let _ = unsafe { (self.hip.api.hipRuntimeGetVersion)(&mut runtime_version) };
        format!(
            "{} HIP {}",
            self.compiler.version(),
            rocm::format_hip_version(runtime_version)
        )
    }

    fn stream_pointer(stream: rocm_api::Stream) -> *mut c_void {
        stream
    }

    unsafe fn malloc(&self, bytes: usize) -> Result<Option<DevicePtr>, DriverError> {
        let mut ptr: *mut c_void = std::ptr::null_mut();
        match (self.hip.api.hipMalloc)(&mut ptr, bytes) {
            rocm_api::HIP_SUCCESS => Ok(Some(DevicePtr(ptr as u64))),
            rocm_api::HIP_ERROR_OUT_OF_MEMORY => Ok(None),
            e => Err(call("hipMalloc", format!("hipError_t {e}"))),
        }
    }

    unsafe fn free(&self, ptr: DevicePtr) {
        let _ = (self.hip.api.hipFree)(ptr.0 as *mut c_void);
    }

    unsafe fn copy_to_device_async(
        &self,
        stream: rocm_api::Stream,
        dst: DevicePtr,
        src: *const u8,
        bytes: usize,
    ) -> Result<(), DriverError> {
        let answer =
            (self.hip.api.hipMemcpyHtoDAsync)(dst.0 as *mut c_void, src.cast(), bytes, stream);
        hip_check("hipMemcpyHtoDAsync", answer)
    }

    unsafe fn copy_to_host_async(
        &self,
        stream: rocm_api::Stream,
        dst: *mut u8,
        src: DevicePtr,
        bytes: usize,
    ) -> Result<(), DriverError> {
        let answer =
            (self.hip.api.hipMemcpyDtoHAsync)(dst.cast(), src.0 as *mut c_void, bytes, stream);
        hip_check("hipMemcpyDtoHAsync", answer)
    }

    unsafe fn copy_on_device_async(
        &self,
        stream: rocm_api::Stream,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
    ) -> Result<(), DriverError> {
        let (to, from) = (dst.0 as *mut c_void, src.0 as *mut c_void);
        hip_check(
            "hipMemcpyDtoDAsync",
            (self.hip.api.hipMemcpyDtoDAsync)(to, from, bytes, stream),
        )
    }

    unsafe fn zero_async(
        &self,
        stream: rocm_api::Stream,
        dst: DevicePtr,
        bytes: usize,
    ) -> Result<(), DriverError> {
        let answer = (self.hip.api.hipMemsetD8Async)(dst.0 as *mut c_void, 0, bytes, stream);
        hip_check("hipMemsetD8Async", answer)
    }

    unsafe fn synchronize(&self, stream: rocm_api::Stream) -> Result<(), DriverError> {
        hip_check(
            "hipStreamSynchronize",
            (self.hip.api.hipStreamSynchronize)(stream),
        )
    }

    fn create_stream(&self) -> Result<rocm_api::Stream, DriverError> {
        let mut stream: rocm_api::Stream = std::ptr::null_mut();
        // SAFETY: writes one stream handle for the current device.
        hip_check("hipStreamCreateWithFlags", unsafe {
            (self.hip.api.hipStreamCreateWithFlags)(&mut stream, STREAM_NON_BLOCKING)
        })?;
        Ok(stream)
    }

    unsafe fn destroy_stream(&self, stream: rocm_api::Stream) {
        let _ = (self.hip.api.hipStreamDestroy)(stream);
    }

    unsafe fn load_module(&self, image: &[u8]) -> Result<rocm_api::Module, DriverError> {
        let mut module: rocm_api::Module = std::ptr::null_mut();
        let answer = (self.hip.api.hipModuleLoadData)(&mut module, image.as_ptr().cast());
        hip_check("hipModuleLoadData", answer)?;
        Ok(module)
    }

    unsafe fn unload_module(&self, module: rocm_api::Module) {
        let _ = (self.hip.api.hipModuleUnload)(module);
    }

    unsafe fn function(&self, module: rocm_api::Module, name: &CStr) -> Option<rocm_api::Function> {
        let mut function: rocm_api::Function = std::ptr::null_mut();
        let answer = (self.hip.api.hipModuleGetFunction)(&mut function, module, name.as_ptr());
        (answer == rocm_api::HIP_SUCCESS).then_some(function)
    }

    unsafe fn launch(
        &self,
        stream: rocm_api::Stream,
        function: rocm_api::Function,
        shape: LaunchShape,
        args: &mut [*mut c_void],
    ) -> Result<(), DriverError> {
        let (grid, block) = (shape.grid, shape.block);
        let answer = (self.hip.api.hipModuleLaunchKernel)(
            function,
            grid.0,
            grid.1,
            grid.2,
            block.0,
            block.1,
            block.2,
            0,
            stream,
            args.as_mut_ptr(),
            std::ptr::null_mut(),
        );
        hip_check("hipModuleLaunchKernel", answer)
    }

    unsafe fn create_blas(
        &self,
        stream: rocm_api::Stream,
    ) -> Result<rocm_api::RocblasHandle, DriverError> {
        let api = &self.blas.api;
        let mut handle: rocm_api::RocblasHandle = std::ptr::null_mut();
        blas_check(
            "rocblas_create_handle",
            (api.rocblas_create_handle)(&mut handle),
        )?;
        blas_check(
            "rocblas_set_stream",
            (api.rocblas_set_stream)(handle, stream),
        )?;
        Ok(handle)
    }

    unsafe fn destroy_blas(&self, handle: rocm_api::RocblasHandle) {
        let _ = (self.blas.api.rocblas_destroy_handle)(handle);
    }

    unsafe fn sgemm(
        &self,
        handle: rocm_api::RocblasHandle,
        cm: &ColumnMajorGemm,
        alpha: f32,
        beta: f32,
    ) -> Result<(), DriverError> {
        let sgemm = self.blas.api.rocblas_sgemm;
        let status = blas_sgemm!(sgemm, handle, blas_operation, cm, alpha, beta);
        blas_check("rocblas_sgemm", status)
    }

    /// rocBLAS has no reduced-precision f32 path to take, so `fast_f32` changes nothing.
    unsafe fn gemm_ex(
        &self,
        handle: rocm_api::RocblasHandle,
        cm: &ColumnMajorGemm,
        alpha: f32,
        beta: f32,
        types: GemmTypes,
        _fast_f32: bool,
    ) -> Result<(), DriverError> {
        let output = blas_type(types.output);
        // C is read (for beta) and D written, both C's matrix.
        let status = blas_gemm_ex!(
            self.blas.api.rocblas_gemm_ex,
            handle,
            blas_operation,
            cm,
            alpha,
            beta,
            blas_type(types.operands),
            output,
            cm.c.0 as *mut c_void,
            output,
            cm.ldc as i32,
            rocm_api::ROCBLAS_F32,
            rocm_api::ROCBLAS_GEMM_ALGO_STANDARD,
            0,
            0,
        );
        blas_check("rocblas_gemm_ex", status)
    }

    fn create_event(&self) -> Result<rocm_api::Event, DriverError> {
        let mut event: rocm_api::Event = std::ptr::null_mut();
        // SAFETY: writes one event handle.
        hip_check("hipEventCreate", unsafe {
            (self.hip.api.hipEventCreate)(&mut event)
        })?;
        Ok(event)
    }

    unsafe fn record_event(
        &self,
        event: rocm_api::Event,
        stream: rocm_api::Stream,
    ) -> Result<(), DriverError> {
        hip_check(
            "hipEventRecord",
            (self.hip.api.hipEventRecord)(event, stream),
        )
    }

    unsafe fn synchronize_event(&self, event: rocm_api::Event) -> Result<(), DriverError> {
        hip_check(
            "hipEventSynchronize",
            (self.hip.api.hipEventSynchronize)(event),
        )
    }

    unsafe fn elapsed_ms(
        &self,
        start: rocm_api::Event,
        end: rocm_api::Event,
    ) -> Result<f32, DriverError> {
        let mut ms = 0f32;
        let answer = (self.hip.api.hipEventElapsedTime)(&mut ms, start, end);
        hip_check("hipEventElapsedTime", answer).map(|()| ms)
    }

    unsafe fn destroy_event(&self, event: rocm_api::Event) {
        let _ = (self.hip.api.hipEventDestroy)(event);
    }

    fn alloc_pinned(&self, bytes: usize) -> Result<*mut u8, DriverError> {
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: writes one host pointer.
        hip_check("hipHostMalloc", unsafe {
            (self.hip.api.hipHostMalloc)(&mut ptr, bytes, 0)
        })?;
        Ok(ptr.cast())
    }

    unsafe fn free_pinned(&self, ptr: *mut u8) {
        let _ = (self.hip.api.hipHostFree)(ptr.cast());
    }

    fn can_access_peer(&self, peer: &Hip) -> bool {
        let mut can = 0;
        // SAFETY: writes one int; both ordinals are devices.
        let answer =
            unsafe { (self.hip.api.hipDeviceCanAccessPeer)(&mut can, self.ordinal, peer.ordinal) };
        answer == rocm_api::HIP_SUCCESS && can != 0
    }

    fn enable_peer_access(&self, peer: &Hip) {
        // SAFETY: entry points resolved at open; the peer's ordinal is a device.
        let _ = unsafe { (self.hip.api.hipDeviceEnablePeerAccess)(peer.ordinal, 0) };
    }

    unsafe fn copy_to_peer_async(
        &self,
        stream: rocm_api::Stream,
        peer: &Hip,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
    ) -> Result<(), DriverError> {
        let answer = (self.hip.api.hipMemcpyPeerAsync)(
            dst.0 as *mut c_void,
            peer.ordinal,
            src.0 as *const c_void,
            self.ordinal,
            bytes,
            stream,
        );
        hip_check("hipMemcpyPeerAsync", answer)
    }
}
