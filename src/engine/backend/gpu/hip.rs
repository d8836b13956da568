//! The HIP driver: the HIP runtime, hiprtc and rocBLAS of whichever ROCm is installed (5.7
//! or 6.x, opened by [`crate::runtime::rocm`]), every library opened at run time with every
//! entry point resolved before the first call. The kernels are the CUDA driver's source
//! under the HIP prelude.

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::{Mutex, PoisonError};

use crate::runtime::rocm::api::{self as rocm_api, HipResult, RocblasDatatype, RocblasStatus};
use crate::runtime::rocm::{self, Hip, Hiprtc, LoadError, Rocblas};

use super::cache::{CacheKey, KernelCache};
use super::driver::{
    DeviceInfo, DevicePtr, DriverError, Gemm, GpuDriver, KernelArg, LaunchShape, MatmulPrecision,
    Transpose,
};
use super::source::{self, Dialect, KERNEL_NAMES};
use crate::engine::Precision;

/// `hipStreamNonBlocking`: the stream does not wait on the legacy default stream.
const STREAM_NON_BLOCKING: u32 = 1;

struct Handles {
    stream: rocm_api::Stream,
    module: rocm_api::Module,
    functions: HashMap<&'static str, rocm_api::Function>,
    blas: rocm_api::RocblasHandle,
}

// SAFETY: HIP handles may be used from any thread once the device is current, which every
// call below makes it first; the rocBLAS handle is only used under `gemm_lock`.
unsafe impl Send for Handles {}
unsafe impl Sync for Handles {}

pub struct HipDriver {
    info: DeviceInfo,
    hip: &'static Hip,
    blas: &'static Rocblas,
    handles: Handles,
    gemm_lock: Mutex<()>,
}

impl std::fmt::Debug for HipDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HipDriver")
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

fn missing(error: LoadError) -> DriverError {
    DriverError::LibraryMissing(error.to_string())
}

/// The HIP runtime, hiprtc and rocBLAS with every entry point used here, or why not.
pub fn check_libraries() -> Result<(&'static Hip, &'static Hiprtc, &'static Rocblas), DriverError> {
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

impl HipDriver {
    pub fn open(ordinal: usize, cache: &KernelCache) -> Result<Self, DriverError> {
        let (hip, rtc, blas) = check_libraries()?;
        crate::runtime::guard::catch(|| Self::open_checked(hip, rtc, blas, ordinal, cache))
            .unwrap_or_else(|panic| {
                Err(DriverError::LibraryMissing(format!("HIP failed: {panic}")))
            })
    }

    fn open_checked(
        hip: &'static Hip,
        rtc: &'static Hiprtc,
        blas: &'static Rocblas,
        ordinal: usize,
        cache: &KernelCache,
    ) -> Result<Self, DriverError> {
        let count = device_count()?;
        if ordinal >= count {
            return Err(DriverError::NoDevice {
                runtime: "HIP",
                ordinal,
                count,
            });
        }
        let api = &hip.api;
        // SAFETY: entry points resolved at open; the ordinal is below the count.
        hip_check("hipSetDevice", unsafe {
            (api.hipSetDevice)(ordinal as i32)
        })?;
        let props = hip
            .properties
            .get(ordinal as i32)
            .map_err(|e| call(hip.properties.layout(), format!("hipError_t {e}")))?;
        let info = DeviceInfo {
            ordinal,
            name: props.name,
            arch: props.gfx_target,
            pci_address: Some(props.pci_address),
            memory_bytes: props.total_memory_bytes,
            multiprocessors: props.multiprocessors,
        };
        let mut stream: rocm_api::Stream = std::ptr::null_mut();
        // SAFETY: writes one stream handle for the current device.
        hip_check("hipStreamCreateWithFlags", unsafe {
            (api.hipStreamCreateWithFlags)(&mut stream, STREAM_NON_BLOCKING)
        })?;
        let module = load_module(hip, rtc, &info.arch, cache)?;
        let mut functions = HashMap::new();
        for &name in KERNEL_NAMES {
            let c_name = CString::new(name).map_err(|e| call("kernel name", e))?;
            let mut function: rocm_api::Function = std::ptr::null_mut();
            // SAFETY: the module is loaded; writes one function handle.
            let answer =
                unsafe { (api.hipModuleGetFunction)(&mut function, module, c_name.as_ptr()) };
            if answer != rocm_api::HIP_SUCCESS {
                return Err(DriverError::UnknownKernel(name.to_string()));
            }
            functions.insert(name, function);
        }
        let mut handle: rocm_api::RocblasHandle = std::ptr::null_mut();
        // SAFETY: writes one handle; the stream belongs to the current device.
        unsafe {
            blas_check(
                "rocblas_create_handle",
                (blas.api.rocblas_create_handle)(&mut handle),
            )?;
            blas_check(
                "rocblas_set_stream",
                (blas.api.rocblas_set_stream)(handle, stream),
            )?;
        }
        Ok(HipDriver {
            info,
            hip,
            blas,
            handles: Handles {
                stream,
                module,
                functions,
                blas: handle,
            },
            gemm_lock: Mutex::new(()),
        })
    }

    fn bind(&self) -> Result<(), DriverError> {
        // SAFETY: entry points resolved at open.
        hip_check("hipSetDevice", unsafe {
            (self.hip.api.hipSetDevice)(self.info.ordinal as i32)
        })
    }
}

fn as_hip(peer: &dyn GpuDriver) -> Result<&HipDriver, DriverError> {
    peer.as_any()
        .downcast_ref::<HipDriver>()
        .ok_or_else(|| DriverError::InvalidArgument("peer is not a HIP device".into()))
}

fn load_data(hip: &Hip, image: &[u8]) -> Result<rocm_api::Module, HipResult> {
    let mut module: rocm_api::Module = std::ptr::null_mut();
    // SAFETY: a complete code object; the runtime copies what it needs.
    let answer = unsafe { (hip.api.hipModuleLoadData)(&mut module, image.as_ptr().cast()) };
    if answer == rocm_api::HIP_SUCCESS {
        Ok(module)
    } else {
        Err(answer)
    }
}

fn load_module(
    hip: &Hip,
    rtc: &Hiprtc,
    arch: &str,
    cache: &KernelCache,
) -> Result<rocm_api::Module, DriverError> {
    let source = source::assemble(Dialect::Hip);
    let options = kernel_options(arch);
    // hiprtc's own version does not move with every ROCm release; the runtime's does.
    let mut runtime_version = 0;
    // SAFETY: writes one int.
    let _ = unsafe { (hip.api.hipRuntimeGetVersion)(&mut runtime_version) };
    let version = format!(
        "{} HIP {}",
        hiprtc_version(rtc),
        rocm::format_hip_version(runtime_version)
    );
    let key = CacheKey {
        runtime: "hip",
        arch,
        compiler_version: &version,
        options: &options,
        source: &source,
    };
    if let Some(image) = cache.load(&key) {
        match load_data(hip, &image) {
            Ok(module) => return Ok(module),
            Err(error) => {
                tracing::warn!(error, "cached HIP kernels did not load; compiling again");
                cache.evict(&key);
            }
        }
    }
    let image = compile(rtc, &source, arch, &options)?;
    let module =
        load_data(hip, &image).map_err(|e| call("hipModuleLoadData", format!("hipError_t {e}")))?;
    cache.store(&key, &image);
    Ok(module)
}

fn kernel_options(arch: &str) -> Vec<String> {
    vec![format!("--offload-arch={arch}"), "-O3".to_string()]
}

/// `hiprtc 5.7`: part of the kernel cache's key, so another ROCm compiles afresh.
pub fn hiprtc_version(rtc: &Hiprtc) -> String {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: writes two ints.
    if unsafe { (rtc.api.hiprtcVersion)(&mut major, &mut minor) } == rocm_api::HIPRTC_SUCCESS {
        format!("hiprtc {major}.{minor}")
    } else {
        "hiprtc unknown".into()
    }
}

/// The file hiprtc was loaded from (its own library, or the HIP runtime before ROCm 6).
pub fn hiprtc_location() -> Option<String> {
    rocm::hiprtc().ok().map(|rtc| rtc.location.clone())
}

/// The engine's kernels compiled by hiprtc for `arch` (`gfx1100`, …) as the backend
/// compiles them, with no GPU needed: the code object and the compiler's version.
pub fn compile_kernels(arch: &str) -> Result<(Vec<u8>, String), DriverError> {
    let rtc = rocm::hiprtc().map_err(missing)?;
    crate::runtime::guard::catch(|| {
        let image = compile(
            rtc,
            &source::assemble(Dialect::Hip),
            arch,
            &kernel_options(arch),
        )?;
        Ok((image, hiprtc_version(rtc)))
    })
    .unwrap_or_else(|panic| {
        Err(DriverError::LibraryMissing(format!(
            "hiprtc failed: {panic}"
        )))
    })
}

fn compile(
    rtc: &Hiprtc,
    source: &str,
    arch: &str,
    options: &[String],
) -> Result<Vec<u8>, DriverError> {
    let api = &rtc.api;
    let compile_error = |log: String| DriverError::Compile {
        arch: arch.to_string(),
        log,
    };
    let c_source = CString::new(source).map_err(|e| compile_error(e.to_string()))?;
    let c_options: Vec<CString> = options
        .iter()
        .map(|o| CString::new(o.as_str()))
        .collect::<Result<_, _>>()
        .map_err(|e| compile_error(e.to_string()))?;
    let option_pointers: Vec<*const std::ffi::c_char> =
        c_options.iter().map(|o| o.as_ptr()).collect();
    let mut program: rocm_api::Program = std::ptr::null_mut();
    // SAFETY: the strings outlive the call; no headers are passed.
    let answer = unsafe {
        (api.hiprtcCreateProgram)(
            &mut program,
            c_source.as_ptr(),
            c"kernels.cu".as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    if answer != rocm_api::HIPRTC_SUCCESS {
        return Err(call(
            "hiprtcCreateProgram",
            format!("hiprtcResult {answer}"),
        ));
    }
    // SAFETY: a live program; the options outlive the call.
    let compiled = unsafe {
        (api.hiprtcCompileProgram)(
            program,
            option_pointers.len() as i32,
            option_pointers.as_ptr(),
        )
    };
    let result = if compiled == rocm_api::HIPRTC_SUCCESS {
        // SAFETY: a live, compiled program.
        unsafe { code(rtc, program) }
    } else {
        // SAFETY: a live program whose compile failed.
        Err(compile_error(unsafe { program_log(rtc, program) }))
    };
    // SAFETY: destroyed once, after its last use.
    let _ = unsafe { (api.hiprtcDestroyProgram)(&mut program) };
    result
}

/// # Safety
/// `program` was compiled successfully and is still live.
unsafe fn code(rtc: &Hiprtc, program: rocm_api::Program) -> Result<Vec<u8>, DriverError> {
    let mut size = 0usize;
    let answer = (rtc.api.hiprtcGetCodeSize)(program, &mut size);
    if answer != rocm_api::HIPRTC_SUCCESS || size == 0 {
        return Err(call("hiprtcGetCodeSize", format!("hiprtcResult {answer}")));
    }
    let mut image = vec![0u8; size];
    let answer = (rtc.api.hiprtcGetCode)(program, image.as_mut_ptr().cast());
    if answer != rocm_api::HIPRTC_SUCCESS {
        return Err(call("hiprtcGetCode", format!("hiprtcResult {answer}")));
    }
    Ok(image)
}

/// # Safety
/// `program` is live.
unsafe fn program_log(rtc: &Hiprtc, program: rocm_api::Program) -> String {
    let mut size = 0usize;
    if (rtc.api.hiprtcGetProgramLogSize)(program, &mut size) != rocm_api::HIPRTC_SUCCESS {
        return "(no log)".into();
    }
    let mut log = vec![0u8; size.max(1)];
    if (rtc.api.hiprtcGetProgramLog)(program, log.as_mut_ptr().cast()) != rocm_api::HIPRTC_SUCCESS {
        return "(no log)".into();
    }
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    String::from_utf8_lossy(&log[..end]).into_owned()
}

/// The rocBLAS format of a 16-bit or f32 operand.
fn blas_type(precision: Precision) -> RocblasDatatype {
    match precision {
        Precision::Fp32 => rocm_api::ROCBLAS_F32,
        Precision::Fp16 => rocm_api::ROCBLAS_F16,
        Precision::Bf16 => rocm_api::ROCBLAS_BF16,
    }
}

impl GpuDriver for HipDriver {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn native_stream(&self) -> *mut c_void {
        self.handles.stream
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn runtime(&self) -> &'static str {
        "hip"
    }

    fn alloc(&self, bytes: usize) -> Result<DevicePtr, DriverError> {
        self.bind()?;
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: writes one device pointer.
        match unsafe { (self.hip.api.hipMalloc)(&mut ptr, bytes.max(1)) } {
            rocm_api::HIP_SUCCESS => Ok(DevicePtr(ptr as u64)),
            rocm_api::HIP_ERROR_OUT_OF_MEMORY => Err(DriverError::OutOfMemory { bytes }),
            e => Err(call("hipMalloc", format!("hipError_t {e}"))),
        }
    }

    unsafe fn free(&self, ptr: DevicePtr) {
        if self.bind().is_ok() {
            let _ = (self.hip.api.hipFree)(ptr.0 as *mut c_void);
        }
    }

    fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<(), DriverError> {
        self.bind()?;
        // SAFETY: `dst` holds at least `src.len()` bytes; the stream drains before return.
        hip_check("hipMemcpyHtoDAsync", unsafe {
            (self.hip.api.hipMemcpyHtoDAsync)(
                dst.0 as *mut c_void,
                src.as_ptr().cast(),
                src.len(),
                self.handles.stream,
            )
        })?;
        self.synchronize()
    }

    fn copy_to_host(&self, dst: &mut [u8], src: DevicePtr) -> Result<(), DriverError> {
        self.bind()?;
        // SAFETY: as above; `dst` is read only after the stream drains.
        hip_check("hipMemcpyDtoHAsync", unsafe {
            (self.hip.api.hipMemcpyDtoHAsync)(
                dst.as_mut_ptr().cast(),
                src.0 as *mut c_void,
                dst.len(),
                self.handles.stream,
            )
        })?;
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
        hip_check("hipMemcpyDtoDAsync", unsafe {
            (self.hip.api.hipMemcpyDtoDAsync)(
                dst.0 as *mut c_void,
                src.0 as *mut c_void,
                bytes,
                self.handles.stream,
            )
        })
    }

    fn zero(&self, dst: DevicePtr, bytes: usize) -> Result<(), DriverError> {
        self.bind()?;
        // SAFETY: `dst` is a live allocation of at least `bytes`.
        hip_check("hipMemsetD8Async", unsafe {
            (self.hip.api.hipMemsetD8Async)(dst.0 as *mut c_void, 0, bytes, self.handles.stream)
        })
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
        let (grid, block) = (shape.grid, shape.block);
        // SAFETY: arguments match the kernel's C signature; `slots` outlives the call.
        let answer = unsafe {
            (self.hip.api.hipModuleLaunchKernel)(
                function,
                grid.0,
                grid.1,
                grid.2,
                block.0,
                block.1,
                block.2,
                0,
                self.handles.stream,
                pointers.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        if answer == rocm_api::HIP_SUCCESS {
            Ok(())
        } else {
            Err(call(
                "hipModuleLaunchKernel",
                format!("{kernel}: hipError_t {answer}"),
            ))
        }
    }

    fn gemm(&self, g: &Gemm) -> Result<(), DriverError> {
        g.validate()?;
        if g.m == 0 || g.n == 0 {
            return Ok(());
        }
        self.bind()?;
        let cm = g.column_major();
        let op = |t: Transpose| match t {
            Transpose::No => rocm_api::ROCBLAS_OPERATION_NONE,
            Transpose::Yes => rocm_api::ROCBLAS_OPERATION_TRANSPOSE,
        };
        let blas = &self.blas.api;
        let _guard = self
            .gemm_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !g.types.is_f32() {
            let (operands, output) = (blas_type(g.types.operands), blas_type(g.types.output));
            // SAFETY: as below, with elements of the formats the call names; C is read (for
            // beta) and written in place.
            let status = unsafe {
                (blas.rocblas_gemm_ex)(
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
                    cm.c.0 as *const c_void,
                    output,
                    cm.ldc as i32,
                    cm.c.0 as *mut c_void,
                    output,
                    cm.ldc as i32,
                    rocm_api::ROCBLAS_F32,
                    rocm_api::ROCBLAS_GEMM_ALGO_STANDARD,
                    0,
                    0,
                )
            };
            return blas_check("rocblas_gemm_ex", status);
        }
        // SAFETY: shapes validated against the leading dimensions; live allocations.
        let status = unsafe {
            (blas.rocblas_sgemm)(
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
        blas_check("rocblas_sgemm", status)
    }

    fn synchronize(&self) -> Result<(), DriverError> {
        self.bind()?;
        // SAFETY: a live stream of this device.
        hip_check("hipStreamSynchronize", unsafe {
            (self.hip.api.hipStreamSynchronize)(self.handles.stream)
        })
    }

    fn alloc_pinned(&self, bytes: usize) -> Result<*mut u8, DriverError> {
        self.bind()?;
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: writes one host pointer.
        hip_check("hipHostMalloc", unsafe {
            (self.hip.api.hipHostMalloc)(&mut ptr, bytes.max(1), 0)
        })?;
        Ok(ptr.cast())
    }

    unsafe fn free_pinned(&self, ptr: *mut u8) {
        let _ = (self.hip.api.hipHostFree)(ptr.cast());
    }

    unsafe fn copy_async(
        &self,
        to_device: bool,
        host: *mut u8,
        device: DevicePtr,
        bytes: usize,
    ) -> Result<(), DriverError> {
        self.bind()?;
        let api = &self.hip.api;
        let answer = if to_device {
            (api.hipMemcpyHtoDAsync)(
                device.0 as *mut c_void,
                host.cast(),
                bytes,
                self.handles.stream,
            )
        } else {
            (api.hipMemcpyDtoHAsync)(
                host.cast(),
                device.0 as *mut c_void,
                bytes,
                self.handles.stream,
            )
        };
        hip_check("hipMemcpyAsync", answer)
    }

    fn enable_peer_access(&self, peer: &dyn GpuDriver) -> Result<(), DriverError> {
        let peer = as_hip(peer)?;
        self.bind()?;
        let (me, other) = (self.info.ordinal as i32, peer.info.ordinal as i32);
        let mut can = 0;
        // SAFETY: writes one int; both ordinals are devices.
        let answer = unsafe { (self.hip.api.hipDeviceCanAccessPeer)(&mut can, me, other) };
        if answer == rocm_api::HIP_SUCCESS && can != 0 {
            // "Already enabled" is not a failure.
            // SAFETY: as above.
            let _ = unsafe { (self.hip.api.hipDeviceEnablePeerAccess)(other, 0) };
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
        let peer = as_hip(peer)?;
        self.bind()?;
        let (me, other) = (self.info.ordinal as i32, peer.info.ordinal as i32);
        // SAFETY: both ranges hold `bytes` on their devices.
        hip_check("hipMemcpyPeerAsync", unsafe {
            (self.hip.api.hipMemcpyPeerAsync)(
                dst.0 as *mut c_void,
                other,
                src.0 as *const c_void,
                me,
                bytes,
                self.handles.stream,
            )
        })
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
        let dtype = match precision {
            MatmulPrecision::F16 => rocm_api::ROCBLAS_F16,
            MatmulPrecision::F32 => rocm_api::ROCBLAS_F32,
        };
        let f32_type = rocm_api::ROCBLAS_F32;
        let none = rocm_api::ROCBLAS_OPERATION_NONE;
        let n = i32::try_from(n)
            .map_err(|_| DriverError::InvalidArgument(format!("matmul size {n}")))?;
        let (alpha, beta) = (1.0f32, 0.0f32);
        let _guard = self
            .gemm_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // SAFETY: the caller's pointers hold n×n elements of the types the call names.
        let status = unsafe {
            (self.blas.api.rocblas_gemm_ex)(
                self.handles.blas,
                none,
                none,
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
                c.0 as *const c_void,
                f32_type,
                n,
                c.0 as *mut c_void,
                f32_type,
                n,
                f32_type,
                rocm_api::ROCBLAS_GEMM_ALGO_STANDARD,
                0,
                0,
            )
        };
        blas_check("rocblas_gemm_ex", status)
    }

    fn time_ms(
        &self,
        work: &mut dyn FnMut() -> Result<(), DriverError>,
    ) -> Result<f64, DriverError> {
        self.bind()?;
        let api = &self.hip.api;
        let mut start: rocm_api::Event = std::ptr::null_mut();
        let mut end: rocm_api::Event = std::ptr::null_mut();
        // SAFETY: each writes one event handle.
        hip_check("hipEventCreate", unsafe {
            (api.hipEventCreate)(&mut start)
        })?;
        if let Err(e) = hip_check("hipEventCreate", unsafe { (api.hipEventCreate)(&mut end) }) {
            // SAFETY: created just now, destroyed once.
            let _ = unsafe { (api.hipEventDestroy)(start) };
            return Err(e);
        }
        let stream = self.handles.stream;
        let result = (|| {
            // SAFETY: live events and stream of this device.
            hip_check("hipEventRecord", unsafe {
                (api.hipEventRecord)(start, stream)
            })?;
            work()?;
            hip_check("hipEventRecord", unsafe {
                (api.hipEventRecord)(end, stream)
            })?;
            hip_check("hipEventSynchronize", unsafe {
                (api.hipEventSynchronize)(end)
            })?;
            let mut ms = 0f32;
            hip_check("hipEventElapsedTime", unsafe {
                (api.hipEventElapsedTime)(&mut ms, start, end)
            })?;
            Ok(ms as f64)
        })();
        // SAFETY: destroyed once, after their last use.
        unsafe {
            let _ = (api.hipEventDestroy)(start);
            let _ = (api.hipEventDestroy)(end);
        }
        result
    }
}

impl Drop for HipDriver {
    fn drop(&mut self) {
        if self.bind().is_err() {
            return;
        }
        let api = &self.hip.api;
        // SAFETY: nothing uses the handles after the driver is dropped.
        unsafe {
            let _ = (api.hipStreamSynchronize)(self.handles.stream);
            let _ = (self.blas.api.rocblas_destroy_handle)(self.handles.blas);
            let _ = (api.hipModuleUnload)(self.handles.module);
            let _ = (api.hipStreamDestroy)(self.handles.stream);
        }
    }
}
