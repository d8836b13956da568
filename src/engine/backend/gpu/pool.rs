//! Pooling layers, NHWC: max pooling (its backward finds each window's argmax again, so
//! the forward keeps no index buffer) and global average pooling.

use super::buffer::GpuBuffer;
use super::driver::KernelArg;
use super::enqueue::{dims_fit_i32, i32_arg};
use super::source::storage_kernel;
use super::{launch, GpuBackend};
use crate::engine::backend::{GlobalPoolParams, PoolParams};
use crate::engine::{Precision, Result};

pub(super) fn max_forward(
    gpu: &GpuBackend,
    p: &PoolParams,
    x: &GpuBuffer,
    y: &mut GpuBuffer,
) -> Result<()> {
    const OP: &str = "max_pool_forward";
    p.validate()?;
    gpu.check(OP, "x", x, p.input_len())?;
    gpu.check_output(OP, "y", y, p.output_len())?;
    dims_fit_i32(OP, &[p.batch, p.in_h, p.in_w, p.channels])?;
    let x = gpu.in_format(x, gpu.precision)?;
    gpu.output(y, gpu.precision)?;
    gpu.elementwise(
        &storage_kernel("max_pool_forward", gpu.precision),
        p.output_len(),
        &[
            &[KernelArg::Ptr(x.ptr), KernelArg::Ptr(y.ptr)][..],
            &window_args(p),
        ]
        .concat(),
    )
}

pub(super) fn max_backward(
    gpu: &GpuBackend,
    p: &PoolParams,
    x: &GpuBuffer,
    dy: &GpuBuffer,
    dx: &mut GpuBuffer,
) -> Result<()> {
    const OP: &str = "max_pool_backward";
    p.validate()?;
    gpu.check(OP, "x", x, p.input_len())?;
    gpu.check(OP, "dy", dy, p.output_len())?;
    gpu.check_output(OP, "dx", dx, p.input_len())?;
    dims_fit_i32(OP, &[p.input_len(), p.output_len()])?;
    let s = gpu.precision;
    let x = gpu.in_format(x, s)?;
    let dy = gpu.in_format(dy, s)?;
    gpu.output(dx, s)?;
    let shape_args = window_args(p);
    // One i32 per window, held in an f32-sized buffer.
    let argmax = gpu.scratch(p.output_len(), Precision::Fp32)?;
    let mut args = vec![KernelArg::Ptr(x.ptr), KernelArg::Ptr(argmax.ptr)];
    args.extend(shape_args);
    gpu.elementwise(&storage_kernel("max_pool_argmax", s), p.output_len(), &args)?;
    let mut args = vec![
        KernelArg::Ptr(argmax.ptr),
        KernelArg::Ptr(dy.ptr),
        KernelArg::Ptr(dx.ptr),
    ];
    args.extend(shape_args);
    gpu.elementwise(
        &storage_kernel("max_pool_backward", s),
        p.input_len(),
        &args,
    )
}

pub(super) fn global_avg_forward(
    gpu: &GpuBackend,
    p: &GlobalPoolParams,
    x: &GpuBuffer,
    y: &mut GpuBuffer,
) -> Result<()> {
    const OP: &str = "global_avg_pool_forward";
    p.validate()?;
    gpu.check(OP, "x", x, p.batch * p.spatial * p.channels)?;
    gpu.check_output(OP, "y", y, p.batch * p.channels)?;
    dims_fit_i32(OP, &[p.batch, p.spatial, p.channels])?;
    let s = gpu.precision;
    let x = gpu.in_format(x, s)?;
    gpu.output(y, s)?;
    gpu.launch(
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

pub(super) fn global_avg_backward(
    gpu: &GpuBackend,
    p: &GlobalPoolParams,
    dy: &GpuBuffer,
    dx: &mut GpuBuffer,
) -> Result<()> {
    const OP: &str = "global_avg_pool_backward";
    p.validate()?;
    gpu.check(OP, "dy", dy, p.batch * p.channels)?;
    gpu.check_output(OP, "dx", dx, p.batch * p.spatial * p.channels)?;
    dims_fit_i32(OP, &[p.batch, p.spatial, p.channels])?;
    let s = gpu.precision;
    let dy = gpu.in_format(dy, s)?;
    gpu.output(dx, s)?;
    gpu.elementwise(
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

/// The max-pool kernels' shape arguments after their pointers: the input's NHWC
/// dimensions, the window and the output's height and width.
fn window_args(p: &PoolParams) -> [KernelArg; 9] {
    [
        p.batch,
        p.in_h,
        p.in_w,
        p.channels,
        p.kernel,
        p.stride,
        p.padding,
        p.out_h(),
        p.out_w(),
    ]
    .map(i32_arg)
}
