//! The ROCm entry points tinyperf calls, as tables of function pointers resolved all at
//! once from a library opened by [`super::open`]: a library that lacks one is refused
//! with the names it lacks, before anything is called.
//!
//! Results and enums cross as plain integers: a value a newer ROCm adds must not become
//! an invalid Rust enum value. The numeric values come from rocmrc's bindings.

#![allow(non_snake_case)]

use std::ffi::{c_char, c_float, c_int, c_uint, c_void};

/// `hipError_t`.
pub type HipResult = c_int;
/// `hipSuccess`.
pub const HIP_SUCCESS: HipResult = rocmrc::hip::sys::hipError_t::hipSuccess as HipResult;
/// `hipErrorNoDevice`: the runtime loaded but sees no GPU.
pub const HIP_ERROR_NO_DEVICE: HipResult =
    rocmrc::hip::sys::hipError_t::hipErrorNoDevice as HipResult;
/// `hipErrorOutOfMemory`.
pub const HIP_ERROR_OUT_OF_MEMORY: HipResult =
    rocmrc::hip::sys::hipError_t::hipErrorOutOfMemory as HipResult;

/// `hiprtcResult`.
pub type HiprtcResult = c_int;
/// `HIPRTC_SUCCESS`.
pub const HIPRTC_SUCCESS: HiprtcResult =
    rocmrc::hiprtc::sys::hiprtcResult::HIPRTC_SUCCESS as HiprtcResult;

/// `rocblas_status`, `rocblas_operation`, `rocblas_datatype`, `rocblas_gemm_algo`.
pub type RocblasStatus = c_int;
/// `rocblas_operation`: whether a GEMM operand is transposed.
pub type RocblasOperation = c_int;
/// `rocblas_datatype`: the element type of a GEMM operand.
pub type RocblasDatatype = c_int;
/// `rocblas_status_success`.
pub const ROCBLAS_SUCCESS: RocblasStatus =
    rocmrc::rocblas::sys::rocblas_status::rocblas_status_success as RocblasStatus;
/// `rocblas_operation_none`: the operand as it is.
pub const ROCBLAS_OPERATION_NONE: RocblasOperation =
    rocmrc::rocblas::sys::rocblas_operation::rocblas_operation_none as RocblasOperation;
/// `rocblas_operation_transpose`: the operand transposed.
pub const ROCBLAS_OPERATION_TRANSPOSE: RocblasOperation =
    rocmrc::rocblas::sys::rocblas_operation::rocblas_operation_transpose as RocblasOperation;
/// `rocblas_datatype_f16_r`: IEEE half precision.
pub const ROCBLAS_F16: RocblasDatatype =
    rocmrc::rocblas::sys::rocblas_datatype::rocblas_datatype_f16_r as RocblasDatatype;
/// `rocblas_datatype_bf16_r`: bfloat16.
pub const ROCBLAS_BF16: RocblasDatatype =
    rocmrc::rocblas::sys::rocblas_datatype::rocblas_datatype_bf16_r as RocblasDatatype;
/// `rocblas_datatype_f32_r`: single precision.
pub const ROCBLAS_F32: RocblasDatatype =
    rocmrc::rocblas::sys::rocblas_datatype::rocblas_datatype_f32_r as RocblasDatatype;
/// `rocblas_gemm_algo_standard`, the only algorithm `rocblas_gemm_ex` takes.
pub const ROCBLAS_GEMM_ALGO_STANDARD: c_int =
    rocmrc::rocblas::sys::rocblas_gemm_algo::rocblas_gemm_algo_standard as c_int;

/// `hipStream_t`.
pub type Stream = *mut c_void;
/// `hipModule_t`: code loaded onto the device.
pub type Module = *mut c_void;
/// `hipFunction_t`: a kernel of a module.
pub type Function = *mut c_void;
/// `hipEvent_t`.
pub type Event = *mut c_void;
/// `hiprtcProgram`: a kernel source being compiled.
pub type Program = *mut c_void;
/// `rocblas_handle`.
pub type RocblasHandle = *mut c_void;

/// A struct of `unsafe extern "C"` function pointers named after their symbols, and the
/// resolver that fills it or names every symbol the library lacks.
macro_rules! entry_points {
    ($(#[$meta:meta])* $name:ident { $($symbol:ident: fn($($arg:ty),* $(,)?) -> $ret:ty;)* }) => {
        $(#[$meta])*
        #[derive(Clone, Copy)]
        pub struct $name {
            $(
                #[doc = concat!("`", stringify!($symbol), "`, resolved from the library.")]
                pub $symbol: unsafe extern "C" fn($($arg),*) -> $ret,
            )*
        }

        impl $name {
            /// The symbols this table resolves, in order.
            pub const SYMBOLS: &'static [&'static str] = &[$(stringify!($symbol)),*];

            /// Every entry point from `library`, or the names of those it lacks.
            pub fn resolve(library: &libloading::Library) -> Result<$name, Vec<&'static str>> {
                let mut missing = Vec::new();
                $(
                    // SAFETY: the pointer's type is the entry point's C signature; the
                    // library is kept loaded for as long as the table lives.
                    let $symbol = unsafe {
                        library.get::<unsafe extern "C" fn($($arg),*) -> $ret>(
                            concat!(stringify!($symbol), "\0").as_bytes(),
                        )
                    }
                    .map(|symbol| *symbol)
                    .map_err(|_| missing.push(stringify!($symbol)))
                    .ok();
                )*
                match ($($symbol,)*) {
                    ($(Some($symbol),)*) => Ok($name { $($symbol,)* }),
                    _ => Err(missing),
                }
            }
        }
    };
}

entry_points! {
    /// The HIP runtime, as both ROCm 5 and ROCm 6 export it. Device properties are not
    /// here: their entry point and layout differ between the two (see `properties`).
    HipApi {
        hipInit: fn(c_uint) -> HipResult;
        hipDriverGetVersion: fn(*mut c_int) -> HipResult;
        hipRuntimeGetVersion: fn(*mut c_int) -> HipResult;
        hipGetDeviceCount: fn(*mut c_int) -> HipResult;
        hipDeviceGet: fn(*mut c_int, c_int) -> HipResult;
        hipDeviceGetName: fn(*mut c_char, c_int, c_int) -> HipResult;
        hipDeviceTotalMem: fn(*mut usize, c_int) -> HipResult;
        hipDeviceGetPCIBusId: fn(*mut c_char, c_int, c_int) -> HipResult;
        hipSetDevice: fn(c_int) -> HipResult;
        hipStreamCreateWithFlags: fn(*mut Stream, c_uint) -> HipResult;
        hipStreamSynchronize: fn(Stream) -> HipResult;
        hipStreamDestroy: fn(Stream) -> HipResult;
        hipMalloc: fn(*mut *mut c_void, usize) -> HipResult;
        hipFree: fn(*mut c_void) -> HipResult;
        hipMemcpyHtoDAsync: fn(*mut c_void, *const c_void, usize, Stream) -> HipResult;
        hipMemcpyDtoHAsync: fn(*mut c_void, *mut c_void, usize, Stream) -> HipResult;
        hipMemcpyDtoDAsync: fn(*mut c_void, *mut c_void, usize, Stream) -> HipResult;
        hipMemsetD8Async: fn(*mut c_void, u8, usize, Stream) -> HipResult;
        hipModuleLoadData: fn(*mut Module, *const c_void) -> HipResult;
        hipModuleGetFunction: fn(*mut Function, Module, *const c_char) -> HipResult;
        hipModuleUnload: fn(Module) -> HipResult;
        hipModuleLaunchKernel: fn(
            Function, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, Stream,
            *mut *mut c_void, *mut *mut c_void,
        ) -> HipResult;
        hipEventCreate: fn(*mut Event) -> HipResult;
        hipEventRecord: fn(Event, Stream) -> HipResult;
        hipEventSynchronize: fn(Event) -> HipResult;
        hipEventElapsedTime: fn(*mut c_float, Event, Event) -> HipResult;
        hipEventDestroy: fn(Event) -> HipResult;
        hipHostMalloc: fn(*mut *mut c_void, usize, c_uint) -> HipResult;
        hipHostFree: fn(*mut c_void) -> HipResult;
        hipMemcpyPeerAsync: fn(*mut c_void, c_int, *const c_void, c_int, usize, Stream) -> HipResult;
        hipDeviceCanAccessPeer: fn(*mut c_int, c_int, c_int) -> HipResult;
        hipDeviceEnablePeerAccess: fn(c_int, c_uint) -> HipResult;
    }
}

entry_points! {
    /// hiprtc: its own library from ROCm 6 on, inside the HIP runtime before.
    HiprtcApi {
        hiprtcVersion: fn(*mut c_int, *mut c_int) -> HiprtcResult;
        hiprtcCreateProgram: fn(
            *mut Program, *const c_char, *const c_char, c_int, *const *const c_char,
            *const *const c_char,
        ) -> HiprtcResult;
        hiprtcCompileProgram: fn(Program, c_int, *const *const c_char) -> HiprtcResult;
        hiprtcDestroyProgram: fn(*mut Program) -> HiprtcResult;
        hiprtcGetProgramLogSize: fn(Program, *mut usize) -> HiprtcResult;
        hiprtcGetProgramLog: fn(Program, *mut c_char) -> HiprtcResult;
        hiprtcGetCodeSize: fn(Program, *mut usize) -> HiprtcResult;
        hiprtcGetCode: fn(Program, *mut c_char) -> HiprtcResult;
    }
}

entry_points! {
    /// rocBLAS: `librocblas.so.0` in ROCm 5, `.so.4` in ROCm 6.
    RocblasApi {
        rocblas_create_handle: fn(*mut RocblasHandle) -> RocblasStatus;
        rocblas_destroy_handle: fn(RocblasHandle) -> RocblasStatus;
        rocblas_set_stream: fn(RocblasHandle, Stream) -> RocblasStatus;
        rocblas_get_version_string: fn(*mut c_char, usize) -> RocblasStatus;
        rocblas_sgemm: fn(
            RocblasHandle, RocblasOperation, RocblasOperation, c_int, c_int, c_int,
            *const c_float, *const c_float, c_int, *const c_float, c_int, *const c_float,
            *mut c_float, c_int,
        ) -> RocblasStatus;
        rocblas_gemm_ex: fn(
            RocblasHandle, RocblasOperation, RocblasOperation, c_int, c_int, c_int,
            *const c_void, *const c_void, RocblasDatatype, c_int, *const c_void,
            RocblasDatatype, c_int, *const c_void, *const c_void, RocblasDatatype, c_int,
            *mut c_void, RocblasDatatype, c_int, RocblasDatatype, c_int, c_int, c_uint,
        ) -> RocblasStatus;
    }
}
