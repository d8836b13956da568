//! Element-wise ops: copies and fills, ReLU, sums and scaling, four elements a thread.

use super::buffer::{element_bytes, GpuBuffer};
use super::driver::KernelArg;
use super::enqueue::i64_arg;
use super::GpuBackend;
use crate::engine::{Precision, Result};

pub(super) fn copy(gpu: &GpuBackend, src: &GpuBuffer, dst: &mut GpuBuffer) -> Result<()> {
    gpu.check("copy", "source", src, src.len)?;
    gpu.check_output("copy", "destination", dst, src.len)?;
    gpu.output(dst, src.storage)?;
    if src.len == 0 {
        return Ok(());
    }
    gpu.driver()
        .copy_on_device(dst.ptr, src.ptr, src.len * element_bytes(src.storage))
        .map_err(|e| gpu.device(e))
}

pub(super) fn fill(gpu: &GpuBackend, buf: &mut GpuBuffer, value: f32) -> Result<()> {
    gpu.check_output("fill", "buffer", buf, buf.len)?;
    gpu.output(buf, Precision::Fp32)?;
    gpu.elementwise_vec4(
        "fill_f32",
        buf.len,
        &[
            KernelArg::Ptr(buf.ptr),
            i64_arg(buf.len),
            KernelArg::F32(value),
        ],
    )
}

/// In place, in whatever format x holds (ReLU selects stored values).
pub(super) fn relu_forward(gpu: &GpuBackend, x: &mut GpuBuffer) -> Result<()> {
    gpu.check("relu_forward", "x", x, x.len)?;
    gpu.storage_elementwise(
        "relu_forward",
        x.storage,
        x.len,
        &[KernelArg::Ptr(x.ptr), i64_arg(x.len)],
    )
}

pub(super) fn relu_backward(gpu: &GpuBackend, y: &GpuBuffer, dy: &mut GpuBuffer) -> Result<()> {
    gpu.check("relu_backward", "y", y, y.len)?;
    gpu.check("relu_backward", "dy", dy, y.len)?;
    // The mask reads y as it is: formats that differ meet in f32, where nothing rounds.
    if y.storage != dy.storage {
        gpu.widen_in_place(dy)?;
    }
    let y = gpu.in_format(y, dy.storage)?;
    gpu.storage_elementwise(
        "relu_backward",
        dy.storage,
        y.len,
        &[
            KernelArg::Ptr(y.ptr),
            KernelArg::Ptr(dy.ptr),
            i64_arg(y.len),
        ],
    )
}

/// An activation sum: in the activation format.
pub(super) fn add(
    gpu: &GpuBackend,
    a: &GpuBuffer,
    b: &GpuBuffer,
    out: &mut GpuBuffer,
) -> Result<()> {
    gpu.check("add", "a", a, a.len)?;
    gpu.check("add", "second operand", b, a.len)?;
    gpu.check_output("add", "out", out, a.len)?;
    let s = gpu.precision;
    let (a, b) = (gpu.in_format(a, s)?, gpu.in_format(b, s)?);
    gpu.output(out, s)?;
    gpu.storage_elementwise(
        "add_f32",
        s,
        a.len,
        &[
            KernelArg::Ptr(a.ptr),
            KernelArg::Ptr(b.ptr),
            KernelArg::Ptr(out.ptr),
            i64_arg(a.len),
        ],
    )
}

/// In dst's format; an f32 dst of a 16-bit backend is rounded after, as an activation.
pub(super) fn add_assign(gpu: &GpuBackend, dst: &mut GpuBuffer, src: &GpuBuffer) -> Result<()> {
    gpu.check("add_assign", "dst", dst, dst.len)?;
    gpu.check("add_assign", "src", src, dst.len)?;
    let src = if dst.storage == Precision::Fp32 {
        gpu.stored_as_f32(src)?
    } else {
        gpu.in_format(src, dst.storage)?
    };
    gpu.storage_elementwise(
        "add_assign_f32",
        dst.storage,
        dst.len,
        &[
            KernelArg::Ptr(dst.ptr),
            KernelArg::Ptr(src.ptr),
            i64_arg(dst.len),
        ],
    )?;
    if dst.storage == Precision::Fp32 {
        gpu.round_to_storage(dst)?;
    }
    Ok(())
}

/// In f32: a 16-bit x is widened first, as the CPU reference scales its stored values.
pub(super) fn scale(gpu: &GpuBackend, x: &mut GpuBuffer, alpha: f32) -> Result<()> {
    gpu.check("scale", "x", x, x.len)?;
    gpu.widen_in_place(x)?;
    gpu.elementwise_vec4(
        "scale_f32",
        x.len,
        &[KernelArg::Ptr(x.ptr), i64_arg(x.len), KernelArg::F32(alpha)],
    )
}

pub(super) fn axpy(gpu: &GpuBackend, alpha: f32, x: &GpuBuffer, y: &mut GpuBuffer) -> Result<()> {
    gpu.check("axpy", "x", x, x.len)?;
    gpu.check("axpy", "y", y, x.len)?;
    gpu.widen_in_place(y)?;
    let x = gpu.in_format(x, Precision::Fp32)?;
    gpu.elementwise_vec4(
        "axpy_f32",
        x.len,
        &[
            KernelArg::F32(alpha),
            KernelArg::Ptr(x.ptr),
            KernelArg::Ptr(y.ptr),
            i64_arg(x.len),
        ],
    )
}
