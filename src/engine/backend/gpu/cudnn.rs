//! Convolutions through cuDNN, when the library is present: NHWC activations, weights in
//! cuDNN's NHWC filter order (output channel slowest), f32 data. Each convolution shape
//! gets its descriptors and algorithms (cuDNN's heuristic choice within a workspace cap)
//! once, and keeps them.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Mutex, PoisonError};

use cudarc::cudnn::sys as dnn;

use super::driver::{DevicePtr, DnnConv, DnnConvOp, DriverError};
use crate::engine::backend::Conv2dParams;
use crate::engine::Precision;

const SYMBOLS: &[&str] = &[
    "cudnnGetVersion",
    "cudnnCreate",
    "cudnnDestroy",
    "cudnnSetStream",
    "cudnnCreateTensorDescriptor",
    "cudnnSetTensor4dDescriptor",
    "cudnnDestroyTensorDescriptor",
    "cudnnCreateFilterDescriptor",
    "cudnnSetFilter4dDescriptor",
    "cudnnDestroyFilterDescriptor",
    "cudnnCreateConvolutionDescriptor",
    "cudnnSetConvolution2dDescriptor",
    "cudnnSetConvolutionMathType",
    "cudnnDestroyConvolutionDescriptor",
    "cudnnGetConvolutionForwardAlgorithm_v7",
    "cudnnGetConvolutionBackwardDataAlgorithm_v7",
    "cudnnGetConvolutionBackwardFilterAlgorithm_v7",
    "cudnnConvolutionForward",
    "cudnnConvolutionBackwardData",
    "cudnnConvolutionBackwardFilter",
];

/// The largest workspace an algorithm may ask for.
const WORKSPACE_CAP_BYTES: usize = 2 << 30;

fn check(call: &'static str, status: dnn::cudnnStatus_t) -> Result<(), DriverError> {
    if status == dnn::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(DriverError::Call {
            call,
            message: format!("{status:?}"),
        })
    }
}

/// Whether cuDNN loads with every symbol used here; `Err` says why not.
pub fn check_library() -> Result<String, String> {
    crate::runtime::private_libraries::preload();
    crate::runtime::guard::catch(|| {
        // SAFETY: only opens the library by its candidate names.
        if !unsafe { dnn::is_culib_present() } {
            return Err("cuDNN (libcudnn.so) not found".to_string());
        }
        // SAFETY: found just now.
        let missing = missing_symbols!(unsafe { dnn::culib() }, SYMBOLS);
        if !missing.is_empty() {
            return Err(format!("cuDNN lacks {}", missing.join(", ")));
        }
        // SAFETY: a plain query.
        let v = unsafe { dnn::cudnnGetVersion() };
        Ok(format!(
            "cuDNN {}.{}.{}",
            v / 10000,
            (v % 10000) / 100,
            v % 100
        ))
    })
    .unwrap_or_else(Err)
}

/// Descriptors and chosen algorithms of one convolution shape.
struct Plan {
    x: dnn::cudnnTensorDescriptor_t,
    y: dnn::cudnnTensorDescriptor_t,
    w: dnn::cudnnFilterDescriptor_t,
    conv: dnn::cudnnConvolutionDescriptor_t,
    forward: (dnn::cudnnConvolutionFwdAlgo_t, usize),
    backward_data: (dnn::cudnnConvolutionBwdDataAlgo_t, usize),
    backward_filter: (dnn::cudnnConvolutionBwdFilterAlgo_t, usize),
}

struct State {
    plans: HashMap<([usize; 9], Precision), Plan>,
    workspace: Option<(DevicePtr, usize)>,
}

/// cuDNN opened on one driver's stream, with the plans and the workspace of the
/// convolution shapes it has run.
pub struct Dnn {
    handle: dnn::cudnnHandle_t,
    math: dnn::cudnnMathType_t,
    state: Mutex<State>,
    /// The library's version as reported (`cuDNN 9.1.0`).
    pub version: String,
}

// SAFETY: the handle and descriptors are used only under `state`'s lock, with the owning
// driver's context current.
unsafe impl Send for Dnn {}
unsafe impl Sync for Dnn {}

fn key(p: &Conv2dParams) -> [usize; 9] {
    [
        p.batch, p.in_h, p.in_w, p.in_c, p.out_c, p.kernel_h, p.kernel_w, p.stride, p.padding,
    ]
}

fn int(v: usize) -> Result<i32, DriverError> {
    i32::try_from(v).map_err(|_| DriverError::InvalidArgument(format!("{v} exceeds cuDNN's int")))
}

impl Dnn {
    /// A handle on `stream` (the driver's context current). `tf32` lets cuDNN use TF32
    /// tensor cores for f32 convolutions.
    pub fn open(stream: *mut c_void, tf32: bool) -> Result<Dnn, String> {
        let version = check_library()?;
        let mut handle: dnn::cudnnHandle_t = std::ptr::null_mut();
        // SAFETY: writes one handle; the stream belongs to the current context.
        unsafe {
            check("cudnnCreate", dnn::cudnnCreate(&mut handle)).map_err(|e| e.to_string())?;
            check("cudnnSetStream", dnn::cudnnSetStream(handle, stream.cast()))
                .map_err(|e| e.to_string())?;
        }
        Ok(Dnn {
            handle,
            math: if tf32 {
                dnn::cudnnMathType_t::CUDNN_DEFAULT_MATH
            } else {
                dnn::cudnnMathType_t::CUDNN_FMA_MATH
            },
            state: Mutex::new(State {
                plans: HashMap::new(),
                workspace: None,
            }),
            version,
        })
    }

    /// Descriptors for `p` on elements of `dtype`, computing in f32 (for 16-bit data, the
    /// "pseudo half" configuration that tensor cores run).
    fn plan(&self, p: &Conv2dParams, dtype: Precision) -> Result<Plan, DriverError> {
        let (n, c, h, w) = (int(p.batch)?, int(p.in_c)?, int(p.in_h)?, int(p.in_w)?);
        let (k, oh, ow) = (int(p.out_c)?, int(p.out_h())?, int(p.out_w())?);
        let nhwc = dnn::cudnnTensorFormat_t::CUDNN_TENSOR_NHWC;
        let f32_type = dnn::cudnnDataType_t::CUDNN_DATA_FLOAT;
        let data_type = match dtype {
            Precision::Fp32 => f32_type,
            Precision::Fp16 => dnn::cudnnDataType_t::CUDNN_DATA_HALF,
            Precision::Bf16 => dnn::cudnnDataType_t::CUDNN_DATA_BFLOAT16,
        };
        // 16-bit operands lose nothing on tensor cores, so they always get them (a strict
        // handle keeps f32 convolutions off TF32; bf16 may have no algorithm without them).
        let math = if dtype.is_reduced() {
            dnn::cudnnMathType_t::CUDNN_TENSOR_OP_MATH
        } else {
            self.math
        };
        let mut plan = Plan {
            x: std::ptr::null_mut(),
            y: std::ptr::null_mut(),
            w: std::ptr::null_mut(),
            conv: std::ptr::null_mut(),
            forward: (
                dnn::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                0,
            ),
            backward_data: (
                dnn::cudnnConvolutionBwdDataAlgo_t::CUDNN_CONVOLUTION_BWD_DATA_ALGO_0,
                0,
            ),
            backward_filter: (
                dnn::cudnnConvolutionBwdFilterAlgo_t::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0,
                0,
            ),
        };
        // SAFETY: each descriptor is created before it is set, and set before use.
        unsafe {
            check(
                "cudnnCreateTensorDescriptor",
                dnn::cudnnCreateTensorDescriptor(&mut plan.x),
            )?;
            check(
                "cudnnCreateTensorDescriptor",
                dnn::cudnnCreateTensorDescriptor(&mut plan.y),
            )?;
            check(
                "cudnnCreateFilterDescriptor",
                dnn::cudnnCreateFilterDescriptor(&mut plan.w),
            )?;
            check(
                "cudnnCreateConvolutionDescriptor",
                dnn::cudnnCreateConvolutionDescriptor(&mut plan.conv),
            )?;
            check(
                "cudnnSetTensor4dDescriptor",
                dnn::cudnnSetTensor4dDescriptor(plan.x, nhwc, data_type, n, c, h, w),
            )?;
            check(
                "cudnnSetTensor4dDescriptor",
                dnn::cudnnSetTensor4dDescriptor(plan.y, nhwc, data_type, n, k, oh, ow),
            )?;
            check(
                "cudnnSetFilter4dDescriptor",
                dnn::cudnnSetFilter4dDescriptor(
                    plan.w,
                    data_type,
                    nhwc,
                    k,
                    c,
                    int(p.kernel_h)?,
                    int(p.kernel_w)?,
                ),
            )?;
            let (pad, stride) = (int(p.padding)?, int(p.stride)?);
            check(
                "cudnnSetConvolution2dDescriptor",
                dnn::cudnnSetConvolution2dDescriptor(
                    plan.conv,
                    pad,
                    pad,
                    stride,
                    stride,
                    1,
                    1,
                    dnn::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                    f32_type,
                ),
            )?;
            check(
                "cudnnSetConvolutionMathType",
                dnn::cudnnSetConvolutionMathType(plan.conv, math),
            )?;
            let mut count = 0;
            let mut fwd: [dnn::cudnnConvolutionFwdAlgoPerf_t; 8] = std::mem::zeroed();
            check(
                "cudnnGetConvolutionForwardAlgorithm_v7",
                dnn::cudnnGetConvolutionForwardAlgorithm_v7(
                    self.handle,
                    plan.x,
                    plan.w,
                    plan.conv,
                    plan.y,
                    fwd.len() as i32,
                    &mut count,
                    fwd.as_mut_ptr(),
                ),
            )?;
            plan.forward = first_fitting(
                &fwd[..count.max(0) as usize],
                |a| (a.status, a.algo, a.memory),
                "forward",
                p,
            )?;
            let mut bwd: [dnn::cudnnConvolutionBwdDataAlgoPerf_t; 8] = std::mem::zeroed();
            check(
                "cudnnGetConvolutionBackwardDataAlgorithm_v7",
                dnn::cudnnGetConvolutionBackwardDataAlgorithm_v7(
                    self.handle,
                    plan.w,
                    plan.y,
                    plan.conv,
                    plan.x,
                    bwd.len() as i32,
                    &mut count,
                    bwd.as_mut_ptr(),
                ),
            )?;
            plan.backward_data = first_fitting(
                &bwd[..count.max(0) as usize],
                |a| (a.status, a.algo, a.memory),
                "backward data",
                p,
            )?;
            let mut flt: [dnn::cudnnConvolutionBwdFilterAlgoPerf_t; 8] = std::mem::zeroed();
            check(
                "cudnnGetConvolutionBackwardFilterAlgorithm_v7",
                dnn::cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                    self.handle,
                    plan.x,
                    plan.y,
                    plan.conv,
                    plan.w,
                    flt.len() as i32,
                    &mut count,
                    flt.as_mut_ptr(),
                ),
            )?;
            plan.backward_filter = first_fitting(
                &flt[..count.max(0) as usize],
                |a| (a.status, a.algo, a.memory),
                "backward filter",
                p,
            )?;
        }
        Ok(plan)
    }

    /// Runs one convolution. `alloc` and `free` give the workspace device memory (the
    /// driver's own), which is kept and grown as shapes need more.
    pub fn run(
        &self,
        c: &DnnConv,
        alloc: &dyn Fn(usize) -> Result<DevicePtr, DriverError>,
        free: &dyn Fn(DevicePtr),
    ) -> Result<(), DriverError> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let k = (key(&c.shape), c.dtype);
        if let std::collections::hash_map::Entry::Vacant(slot) = state.plans.entry(k) {
            slot.insert(self.plan(&c.shape, c.dtype)?);
        }
        let needed = {
            let plan = &state.plans[&k];
            match c.op {
                DnnConvOp::Forward => plan.forward.1,
                DnnConvOp::BackwardData => plan.backward_data.1,
                DnnConvOp::BackwardFilter => plan.backward_filter.1,
            }
        };
        let workspace = match state.workspace {
            Some((ptr, size)) if size >= needed => (ptr, size),
            old => {
                if let Some((ptr, _)) = old {
                    free(ptr);
                }
                state.workspace = None;
                let size = needed.max(1 << 20);
                let ptr = alloc(size)?;
                state.workspace = Some((ptr, size));
                (ptr, size)
            }
        };
        let plan = &state.plans[&k];
        let (alpha, beta) = (1.0f32, 0.0f32);
        let (a, b) = (
            (&alpha as *const f32).cast::<c_void>(),
            (&beta as *const f32).cast::<c_void>(),
        );
        let ws = workspace.0 .0 as *mut c_void;
        let ptr = |p: DevicePtr| p.0 as *mut c_void;
        // SAFETY: the pointers are live device allocations the backend sized for this
        // shape; the descriptors describe exactly that shape.
        let status = unsafe {
            match c.op {
                DnnConvOp::Forward => dnn::cudnnConvolutionForward(
                    self.handle,
                    a,
                    plan.x,
                    ptr(c.x),
                    plan.w,
                    ptr(c.w),
                    plan.conv,
                    plan.forward.0,
                    ws,
                    workspace.1,
                    b,
                    plan.y,
                    ptr(c.y),
                ),
                DnnConvOp::BackwardData => dnn::cudnnConvolutionBackwardData(
                    self.handle,
                    a,
                    plan.w,
                    ptr(c.w),
                    plan.y,
                    ptr(c.y),
                    plan.conv,
                    plan.backward_data.0,
                    ws,
                    workspace.1,
                    b,
                    plan.x,
                    ptr(c.x),
                ),
                DnnConvOp::BackwardFilter => dnn::cudnnConvolutionBackwardFilter(
                    self.handle,
                    a,
                    plan.x,
                    ptr(c.x),
                    plan.y,
                    ptr(c.y),
                    plan.conv,
                    plan.backward_filter.0,
                    ws,
                    workspace.1,
                    b,
                    plan.w,
                    ptr(c.w),
                ),
            }
        };
        check("cudnnConvolution", status)
    }

    /// Frees the workspace through `free` and destroys every descriptor and the handle.
    pub fn close(&self, free: &dyn Fn(DevicePtr)) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((ptr, _)) = state.workspace.take() {
            free(ptr);
        }
        for (_, plan) in state.plans.drain() {
            // SAFETY: created in `plan` and used by nothing after this.
            unsafe {
                dnn::cudnnDestroyTensorDescriptor(plan.x);
                dnn::cudnnDestroyTensorDescriptor(plan.y);
                dnn::cudnnDestroyFilterDescriptor(plan.w);
                dnn::cudnnDestroyConvolutionDescriptor(plan.conv);
            }
        }
        // SAFETY: as above.
        unsafe {
            dnn::cudnnDestroy(self.handle);
        }
    }
}

/// The first of the algorithms cuDNN ranked (fastest first) that it could run within
/// the workspace cap, with the workspace it needs; `fields` reads a ranking entry's
/// status, algorithm and workspace bytes, `what` names the pass in the error.
fn first_fitting<P, A>(
    ranked: &[P],
    fields: impl Fn(&P) -> (dnn::cudnnStatus_t, A, usize),
    what: &str,
    p: &Conv2dParams,
) -> Result<(A, usize), DriverError> {
    ranked
        .iter()
        .map(fields)
        .find(|(status, _, memory)| {
            *status == dnn::cudnnStatus_t::CUDNN_STATUS_SUCCESS && *memory <= WORKSPACE_CAP_BYTES
        })
        .map(|(_, algo, memory)| (algo, memory))
        .ok_or_else(|| no_algorithm(what, p))
}

fn no_algorithm(what: &str, p: &Conv2dParams) -> DriverError {
    DriverError::InvalidArgument(format!(
        "cuDNN has no {what} algorithm within {} GiB of workspace for {p:?}",
        WORKSPACE_CAP_BYTES >> 30
    ))
}
