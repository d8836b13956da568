//! The HIP driver: the HIP runtime, hiprtc and rocBLAS through rocmrc, every library opened
//! at run time. The kernels are the CUDA driver's source under the HIP prelude. As with
//! cudarc, a missing symbol panics on first call, so `open` checks every symbol first and
//! runs inside a panic guard.

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::{Mutex, PoisonError};

use rocmrc::hip::{result as hip, sys};
use rocmrc::hiprtc::{result as rtc, sys as rtc_sys};
use rocmrc::rocblas::sys as blas;

use super::cache::{CacheKey, KernelCache};
use super::driver::{
    DeviceInfo, DevicePtr, DriverError, Gemm, GpuDriver, KernelArg, LaunchShape, MatmulPrecision,
    Transpose,
};
use super::source::{self, Dialect, KERNEL_NAMES};
use crate::engine::Precision;

const HIP_SYMBOLS: &[&str] = &[
    "hipInit",
    "hipGetDeviceCount",
    "hipSetDevice",
    "hipGetDevicePropertiesR0600",
    "hipDeviceGetAttribute",
    "hipStreamCreateWithFlags",
    "hipStreamSynchronize",
    "hipStreamDestroy",
    "hipMalloc",
    "hipFree",
    "hipMemcpyHtoDAsync",
    "hipMemcpyDtoHAsync",
    "hipMemcpyDtoDAsync",
    "hipMemsetD8Async",
    "hipModuleLoadData",
    "hipModuleGetFunction",
    "hipModuleUnload",
    "hipModuleLaunchKernel",
    "hipEventCreate",
    "hipEventRecord",
    "hipEventSynchronize",
    "hipEventElapsedTime",
    "hipEventDestroy",
    "hipHostMalloc",
    "hipHostFree",
    "hipMemcpyPeerAsync",
    "hipDeviceCanAccessPeer",
    "hipDeviceEnablePeerAccess",
];

const HIPRTC_SYMBOLS: &[&str] = &[
    "hiprtcCreateProgram",
    "hiprtcCompileProgram",
    "hiprtcDestroyProgram",
    "hiprtcGetProgramLogSize",
    "hiprtcGetProgramLog",
    "hiprtcGetCodeSize",
    "hiprtcGetCode",
];

const ROCBLAS_SYMBOLS: &[&str] = &[
    "rocblas_create_handle",
    "rocblas_destroy_handle",
    "rocblas_set_stream",
    "rocblas_sgemm",
    "rocblas_gemm_ex",
];

struct Handles {
    stream: sys::hipStream_t,
    module: sys::hipModule_t,
    functions: HashMap<&'static str, sys::hipFunction_t>,
    blas: blas::rocblas_handle,
}

// SAFETY: HIP handles may be used from any thread once the device is current, which every
// call below makes it first; the rocBLAS handle is only used under `gemm_lock`.
unsafe impl Send for Handles {}
unsafe impl Sync for Handles {}

pub struct HipDriver {
    info: DeviceInfo,
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

fn blas_check(name: &'static str, status: blas::rocblas_status) -> Result<(), DriverError> {
    if status == blas::rocblas_status::rocblas_status_success {
        Ok(())
    } else {
        Err(call(name, status))
    }
}

/// Whether the HIP runtime, hiprtc and rocBLAS can be opened with every symbol used here.
pub fn check_libraries() -> Result<(), DriverError> {
    crate::runtime::guard::catch(|| {
        // SAFETY: each check only opens the library by its candidate names.
        let present = unsafe {
            [
                (
                    "HIP runtime library (libamdhip64.so)",
                    sys::is_rocmlib_present(),
                ),
                (
                    "hiprtc library (libhiprtc.so)",
                    rtc_sys::is_rocmlib_present(),
                ),
                (
                    "rocBLAS library (librocblas.so)",
                    blas::is_rocmlib_present(),
                ),
            ]
        };
        if let Some((name, _)) = present.iter().find(|(_, ok)| !ok) {
            return Err(DriverError::LibraryMissing(format!("{name} not found")));
        }
        // SAFETY: found just now; `rocmlib` opens them by the same names.
        let mut missing = missing_symbols!(unsafe { sys::rocmlib() }, HIP_SYMBOLS);
        missing.extend(missing_symbols!(
            unsafe { rtc_sys::rocmlib() },
            HIPRTC_SYMBOLS
        ));
        missing.extend(missing_symbols!(
            unsafe { blas::rocmlib() },
            ROCBLAS_SYMBOLS
        ));
        if missing.is_empty() {
            Ok(())
        } else {
            Err(DriverError::LibraryMissing(format!(
                "the ROCm libraries lack {}",
                missing.join(", ")
            )))
        }
    })
    .unwrap_or_else(|panic| {
        Err(DriverError::LibraryMissing(format!(
            "ROCm libraries failed to load: {panic}"
        )))
    })
}

/// Number of HIP devices, or why there are none to use.
pub fn device_count() -> Result<usize, DriverError> {
    check_libraries()?;
    crate::runtime::guard::catch(|| {
        hip::init().map_err(|e| call("hipInit", e))?;
        hip::device::get_count()
            .map(|n| n.max(0) as usize)
            .map_err(|e| call("hipGetDeviceCount", e))
    })
    .unwrap_or_else(|panic| Err(DriverError::LibraryMissing(panic)))
}

impl HipDriver {
    pub fn open(ordinal: usize, cache: &KernelCache) -> Result<Self, DriverError> {
        check_libraries()?;
        crate::runtime::guard::catch(|| Self::open_checked(ordinal, cache)).unwrap_or_else(
            |panic| Err(DriverError::LibraryMissing(format!("HIP failed: {panic}"))),
        )
    }

    fn open_checked(ordinal: usize, cache: &KernelCache) -> Result<Self, DriverError> {
        hip::init().map_err(|e| call("hipInit", e))?;
        let count = hip::device::get_count()
            .map_err(|e| call("hipGetDeviceCount", e))?
            .max(0) as usize;
        if ordinal >= count {
            return Err(DriverError::NoDevice {
                runtime: "HIP",
                ordinal,
                count,
            });
        }
        hip::device::set_device(ordinal as i32).map_err(|e| call("hipSetDevice", e))?;
        let props = hip::device::get_properties(ordinal as i32)
            .map_err(|e| call("hipGetDeviceProperties", e))?;
        let text = |raw: &[std::ffi::c_char]| -> String {
            let bytes: Vec<u8> = raw
                .iter()
                .map(|&c| c as u8)
                .take_while(|&b| b != 0)
                .collect();
            String::from_utf8_lossy(&bytes).into_owned()
        };
        // `gfx1100:sramecc-:xnack-`: the compiler target is the part before the features.
        let arch_full = text(&props.gcnArchName);
        let arch = arch_full.split(':').next().unwrap_or("").to_string();
        let info = DeviceInfo {
            ordinal,
            name: text(&props.name),
            arch,
            pci_address: Some(format!(
                "{:04x}:{:02x}:{:02x}.0",
                props.pciDomainID, props.pciBusID, props.pciDeviceID
            )),
            memory_bytes: props.totalGlobalMem as u64,
            multiprocessors: props.multiProcessorCount.max(0) as u32,
        };
        let stream = hip::stream::create(hip::stream::StreamKind::NonBlocking)
            .map_err(|e| call("hipStreamCreate", e))?;
        let module = load_module(&info.arch, cache)?;
        let mut functions = HashMap::new();
        for &name in KERNEL_NAMES {
            let c_name = CString::new(name).map_err(|e| call("kernel name", e))?;
            let function = hip::module::get_function(module, &c_name)
                .map_err(|_| DriverError::UnknownKernel(name.to_string()))?;
            functions.insert(name, function);
        }
        let mut handle: blas::rocblas_handle = std::ptr::null_mut();
        // SAFETY: writes one handle; the stream belongs to the current device.
        unsafe {
            blas_check(
                "rocblas_create_handle",
                blas::rocblas_create_handle(&mut handle),
            )?;
            blas_check(
                "rocblas_set_stream",
                blas::rocblas_set_stream(handle, stream as _),
            )?;
        }
        Ok(HipDriver {
            info,
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
        hip::device::set_device(self.info.ordinal as i32).map_err(|e| call("hipSetDevice", e))
    }
}

fn as_hip(peer: &dyn GpuDriver) -> Result<&HipDriver, DriverError> {
    peer.as_any()
        .downcast_ref::<HipDriver>()
        .ok_or_else(|| DriverError::InvalidArgument("peer is not a HIP device".into()))
}

fn load_module(arch: &str, cache: &KernelCache) -> Result<sys::hipModule_t, DriverError> {
    let source = source::assemble(Dialect::Hip);
    let options = kernel_options(arch);
    let key = CacheKey {
        runtime: "hip",
        arch,
        compiler_version: "hiprtc",
        options: &options,
        source: &source,
    };
    if let Some(image) = cache.load(&key) {
        // SAFETY: a complete code object; the runtime copies what it needs.
        match unsafe { hip::module::load_data(&image) } {
            Ok(module) => return Ok(module),
            Err(error) => {
                tracing::warn!(?error, "cached HIP kernels did not load; compiling again");
                cache.evict(&key);
            }
        }
    }
    let image = compile(&source, arch, &options)?;
    // SAFETY: as above.
    let module =
        unsafe { hip::module::load_data(&image) }.map_err(|e| call("hipModuleLoadData", e))?;
    cache.store(&key, &image);
    Ok(module)
}

fn kernel_options(arch: &str) -> Vec<String> {
    vec![format!("--offload-arch={arch}"), "-O3".to_string()]
}

/// The engine's kernels compiled by hiprtc for `arch` (`gfx1100`, …) as the backend
/// compiles them, with no GPU needed: the code object and the compiler's name.
pub fn compile_kernels(arch: &str) -> Result<(Vec<u8>, String), DriverError> {
    crate::runtime::guard::catch(|| {
        // SAFETY: only opens the library by its candidate names.
        if !unsafe { rtc_sys::is_rocmlib_present() } {
            return Err(DriverError::LibraryMissing(
                "hiprtc library (libhiprtc.so) not found".into(),
            ));
        }
        // SAFETY: found just now; `rocmlib` opens it by the same names.
        let missing = missing_symbols!(unsafe { rtc_sys::rocmlib() }, HIPRTC_SYMBOLS);
        if !missing.is_empty() {
            return Err(DriverError::LibraryMissing(format!(
                "the hiprtc library lacks {}",
                missing.join(", ")
            )));
        }
        let image = compile(&source::assemble(Dialect::Hip), arch, &kernel_options(arch))?;
        Ok((image, "hiprtc".to_string()))
    })
    .unwrap_or_else(|panic| {
        Err(DriverError::LibraryMissing(format!(
            "hiprtc failed to load: {panic}"
        )))
    })
}

fn compile(source: &str, arch: &str, options: &[String]) -> Result<Vec<u8>, DriverError> {
    let compile_error = |log: String| DriverError::Compile {
        arch: arch.to_string(),
        log,
    };
    let c_source = CString::new(source).map_err(|e| compile_error(e.to_string()))?;
    let program = rtc::create_program(&c_source, Some(c"kernels.cu"))
        .map_err(|e| call("hiprtcCreateProgram", e))?;
    let result = match rtc::compile_program(program, options) {
        Ok(()) => rtc::get_hsaco(program)
            .map(|code| code.iter().map(|&c| c as u8).collect())
            .map_err(|e| call("hiprtcGetCode", e)),
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
    };
    let _ = rtc::destroy_program(program);
    result
}

impl GpuDriver for HipDriver {
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
        "hip"
    }

    fn alloc(&self, bytes: usize) -> Result<DevicePtr, DriverError> {
        self.bind()?;
        match hip::malloc_sync(bytes.max(1)) {
            Ok(ptr) => Ok(DevicePtr(ptr)),
            Err(e) if e.0 == sys::hipError_t::hipErrorOutOfMemory => {
                Err(DriverError::OutOfMemory { bytes })
            }
            Err(e) => Err(call("hipMalloc", e)),
        }
    }

    unsafe fn free(&self, ptr: DevicePtr) {
        if self.bind().is_ok() {
            let _ = hip::free_sync(ptr.0);
        }
    }

    fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<(), DriverError> {
        self.bind()?;
        // SAFETY: `dst` holds at least `src.len()` bytes; the stream drains before return.
        unsafe { hip::memcpy_htod_async(dst.0, src, self.handles.stream) }
            .map_err(|e| call("hipMemcpyHtoDAsync", e))?;
        self.synchronize()
    }

    fn copy_to_host(&self, dst: &mut [u8], src: DevicePtr) -> Result<(), DriverError> {
        self.bind()?;
        // SAFETY: as above; `dst` is read only after the stream drains.
        unsafe { hip::memcpy_dtoh_async(dst, src.0, self.handles.stream) }
            .map_err(|e| call("hipMemcpyDtoHAsync", e))?;
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
        unsafe { hip::memcpy_dtod_async(dst.0, src.0, bytes, self.handles.stream) }
            .map_err(|e| call("hipMemcpyDtoDAsync", e))
    }

    fn zero(&self, dst: DevicePtr, bytes: usize) -> Result<(), DriverError> {
        self.bind()?;
        // SAFETY: `dst` is a live allocation of at least `bytes`.
        unsafe { hip::memset_d8_async(dst.0, 0, bytes, self.handles.stream) }
            .map_err(|e| call("hipMemsetD8Async", e))
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
        // SAFETY: arguments match the kernel's C signature; `slots` outlives the call.
        unsafe {
            hip::launch_kernel(
                function,
                shape.grid,
                shape.block,
                0,
                self.handles.stream,
                &mut pointers,
            )
        }
        .map_err(|e| call("hipModuleLaunchKernel", format!("{kernel}: {e:?}")))
    }

    fn gemm(&self, g: &Gemm) -> Result<(), DriverError> {
        g.validate()?;
        if g.m == 0 || g.n == 0 {
            return Ok(());
        }
        self.bind()?;
        let cm = g.column_major();
        let op = |t: Transpose| match t {
            Transpose::No => blas::rocblas_operation::rocblas_operation_none,
            Transpose::Yes => blas::rocblas_operation::rocblas_operation_transpose,
        };
        let _guard = self
            .gemm_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !g.types.is_f32() {
            let data_type = |p: Precision| match p {
                Precision::Fp32 => blas::rocblas_datatype::rocblas_datatype_f32_r,
                Precision::Fp16 => blas::rocblas_datatype::rocblas_datatype_f16_r,
                Precision::Bf16 => blas::rocblas_datatype::rocblas_datatype_bf16_r,
            };
            let (operands, output) = (data_type(g.types.operands), data_type(g.types.output));
            // SAFETY: as below, with elements of the formats the call names; C is read (for
            // beta) and written in place.
            let status = unsafe {
                blas::rocblas_gemm_ex(
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
                    blas::rocblas_datatype::rocblas_datatype_f32_r,
                    blas::rocblas_gemm_algo::rocblas_gemm_algo_standard,
                    0,
                    0,
                )
            };
            return blas_check("rocblas_gemm_ex", status);
        }
        // SAFETY: shapes validated against the leading dimensions; live allocations.
        let status = unsafe {
            blas::rocblas_sgemm(
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
        hip::stream::synchronize(self.handles.stream).map_err(|e| call("hipStreamSynchronize", e))
    }

    fn alloc_pinned(&self, bytes: usize) -> Result<*mut u8, DriverError> {
        self.bind()?;
        hip::malloc_host(bytes.max(1), 0)
            .map(|p| p.cast())
            .map_err(|e| call("hipHostMalloc", e))
    }

    unsafe fn free_pinned(&self, ptr: *mut u8) {
        let _ = hip::free_host(ptr.cast());
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
            hip::memcpy_htod_async(device.0, host, self.handles.stream)
        } else {
            hip::memcpy_dtoh_async(host, device.0, self.handles.stream)
        }
        .map_err(|e| call("hipMemcpyAsync", e))
    }

    fn enable_peer_access(&self, peer: &dyn GpuDriver) -> Result<(), DriverError> {
        let peer = as_hip(peer)?;
        self.bind()?;
        let (me, other) = (self.info.ordinal as i32, peer.info.ordinal as i32);
        if hip::device::can_access_peer(me, other).unwrap_or(false) {
            // "Already enabled" is not a failure.
            let _ = hip::device::enable_peer_access(other, 0);
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
        unsafe { hip::memcpy_peer_async(dst.0, other, src.0, me, bytes, self.handles.stream) }
            .map_err(|e| call("hipMemcpyPeerAsync", e))
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
            MatmulPrecision::F16 => blas::rocblas_datatype::rocblas_datatype_f16_r,
            MatmulPrecision::F32 => blas::rocblas_datatype::rocblas_datatype_f32_r,
        };
        let f32_type = blas::rocblas_datatype::rocblas_datatype_f32_r;
        let none = blas::rocblas_operation::rocblas_operation_none;
        let n = i32::try_from(n)
            .map_err(|_| DriverError::InvalidArgument(format!("matmul size {n}")))?;
        let (alpha, beta) = (1.0f32, 0.0f32);
        let _guard = self
            .gemm_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // SAFETY: the caller's pointers hold n×n elements of the types the call names.
        let status = unsafe {
            blas::rocblas_gemm_ex(
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
                blas::rocblas_gemm_algo::rocblas_gemm_algo_standard,
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
        let start = hip::event::create().map_err(|e| call("hipEventCreate", e))?;
        let end = hip::event::create().map_err(|e| call("hipEventCreate", e))?;
        let result = (|| {
            hip::event::record(start, self.handles.stream)
                .map_err(|e| call("hipEventRecord", e))?;
            work()?;
            hip::event::record(end, self.handles.stream).map_err(|e| call("hipEventRecord", e))?;
            hip::event::synchronize(end).map_err(|e| call("hipEventSynchronize", e))?;
            hip::event::elapsed(start, end)
                .map(|ms| ms as f64)
                .map_err(|e| call("hipEventElapsedTime", e))
        })();
        let _ = hip::event::destroy(start);
        let _ = hip::event::destroy(end);
        result
    }
}

impl Drop for HipDriver {
    fn drop(&mut self) {
        if self.bind().is_err() {
            return;
        }
        let _ = hip::stream::synchronize(self.handles.stream);
        // SAFETY: nothing uses the handles after the driver is dropped.
        unsafe {
            let _ = blas::rocblas_destroy_handle(self.handles.blas);
            let _ = hip::module::unload(self.handles.module);
        }
        let _ = hip::stream::destroy(self.handles.stream);
    }
}
