//! What the optimizer asks of the device: momentum updates, sums of squares for the
//! norms, and the non-finite check, one launch per tensor or one for all of them.

use super::buffer::GpuBuffer;
use super::driver::{DevicePtr, KernelArg};
use super::enqueue::{dims_fit_i32, i32_arg, i64_arg};
use super::{launch, multi_tensor, GpuBackend};
use crate::engine::backend::{Backend, MomentumStep};
use crate::engine::{EngineError, Precision, Result};

pub(super) fn momentum_update(
    gpu: &GpuBackend,
    w: &mut GpuBuffer,
    g: &GpuBuffer,
    b: &mut GpuBuffer,
    momentum: f32,
    step: f32,
    decay: f32,
) -> Result<()> {
    const OP: &str = "momentum_update";
    gpu.check(OP, "w", w, w.len)?;
    gpu.check(OP, "g", g, w.len)?;
    gpu.check(OP, "b", b, w.len)?;
    gpu.require_f32(OP, "w", w)?;
    gpu.require_f32(OP, "b", b)?;
    let g = gpu.in_format(g, Precision::Fp32)?;
    gpu.elementwise_vec4(
        "momentum_update",
        w.len,
        &[
            KernelArg::Ptr(w.ptr),
            KernelArg::Ptr(g.ptr),
            KernelArg::Ptr(b.ptr),
            i64_arg(w.len),
            KernelArg::F32(momentum),
            KernelArg::F32(step),
            KernelArg::F32(step * decay),
        ],
    )
}

pub(super) fn sum_squares(
    gpu: &GpuBackend,
    x: &GpuBuffer,
    out: &mut GpuBuffer,
    index: usize,
) -> Result<()> {
    gpu.check("sum_squares", "x", x, x.len)?;
    gpu.check_output("sum_squares", "out", out, out.len)?;
    index_within("sum_squares", out, index)?;
    sums_output(gpu, "sum_squares", out)?;
    let x = gpu.in_format(x, Precision::Fp32)?;
    let shape = launch::reduction(x.len);
    let partials = gpu.scratch(shape.grid.0 as usize, Precision::Fp32)?;
    gpu.launch(
        "sum_squares_partial",
        shape,
        &[
            KernelArg::Ptr(x.ptr),
            i64_arg(x.len),
            KernelArg::Ptr(partials.ptr),
        ],
    )?;
    gpu.launch(
        "sum_partials",
        launch::single_block(),
        &[
            KernelArg::Ptr(partials.ptr),
            i32_arg(shape.grid.0 as usize),
            KernelArg::Ptr(out.ptr),
            i32_arg(index),
        ],
    )
}

pub(super) fn momentum_update_many(
    gpu: &GpuBackend,
    momentum: f32,
    updates: &mut [MomentumStep<'_, GpuBuffer>],
) -> Result<()> {
    const OP: &str = "momentum_update_many";
    if !gpu.multi_tensor_optimizer {
        for u in updates.iter_mut() {
            gpu.momentum_update(u.w, u.g, u.b, momentum, u.step, u.decay)?;
        }
        return Ok(());
    }
    let mut entries = Vec::with_capacity(updates.len());
    // 16-bit gradients widened for the update live until the launch has read them.
    let mut widened = Vec::new();
    for u in updates.iter() {
        let n = u.w.len;
        gpu.check(OP, "w", u.w, n)?;
        gpu.check(OP, "g", u.g, n)?;
        gpu.check(OP, "b", u.b, n)?;
        gpu.require_f32(OP, "w", u.w)?;
        gpu.require_f32(OP, "b", u.b)?;
        let g = f32_address(gpu, u.g, &mut widened)?;
        if n > 0 {
            entries.push(multi_tensor::MomentumEntry::new(
                u.w.ptr, g, u.b.ptr, n, u.step, u.decay,
            ));
        }
    }
    if entries.is_empty() {
        return Ok(());
    }
    let table = gpu.device_table(&entries)?;
    let largest = entries.iter().map(|e| e.n as usize).max().unwrap_or(0);
    gpu.launch(
        "momentum_update_multi",
        multi_tensor::shape(entries.len(), largest),
        &[KernelArg::Ptr(table.ptr), KernelArg::F32(momentum)],
    )
}

pub(super) fn sum_squares_many(
    gpu: &GpuBackend,
    xs: &[(&GpuBuffer, usize)],
    out: &mut GpuBuffer,
) -> Result<()> {
    const OP: &str = "sum_squares_many";
    if !gpu.multi_tensor_optimizer {
        for &(x, index) in xs {
            gpu.sum_squares(x, out, index)?;
        }
        return Ok(());
    }
    gpu.check_output(OP, "out", out, out.len)?;
    sums_output(gpu, OP, out)?;
    let mut entries = Vec::with_capacity(xs.len());
    let mut indices = Vec::with_capacity(xs.len());
    let mut widened = Vec::new();
    for &(x, index) in xs {
        gpu.check(OP, "x", x, x.len)?;
        index_within(OP, out, index)?;
        dims_fit_i32(OP, &[index])?;
        let ptr = f32_address(gpu, x, &mut widened)?;
        entries.push(multi_tensor::SquaresEntry {
            x: ptr.0,
            n: x.len as i64,
        });
        indices.push(index as i32);
    }
    if entries.is_empty() {
        return Ok(());
    }
    let table = gpu.device_table(&entries)?;
    let index_table = gpu.device_table(&indices)?;
    let largest = entries.iter().map(|e| e.n as usize).max().unwrap_or(0);
    let shape = multi_tensor::shape(entries.len(), largest);
    let per_tensor = shape.grid.0 as usize;
    let partials = gpu.scratch(per_tensor * entries.len(), Precision::Fp32)?;
    gpu.launch(
        "sum_squares_multi_partial",
        shape,
        &[KernelArg::Ptr(table.ptr), KernelArg::Ptr(partials.ptr)],
    )?;
    gpu.launch(
        "sum_partials_multi",
        launch::block_per_row(entries.len()),
        &[
            KernelArg::Ptr(partials.ptr),
            i32_arg(per_tensor),
            KernelArg::Ptr(index_table.ptr),
            KernelArg::Ptr(out.ptr),
        ],
    )
}

pub(super) fn has_non_finite(gpu: &GpuBackend, x: &GpuBuffer) -> Result<bool> {
    gpu.check("has_non_finite", "x", x, x.len)?;
    let x = gpu.in_format(x, Precision::Fp32)?;
    let flag = gpu.zeros(1)?;
    gpu.elementwise(
        "non_finite_flag",
        x.len,
        &[
            KernelArg::Ptr(x.ptr),
            i64_arg(x.len),
            KernelArg::Ptr(flag.ptr),
        ],
    )?;
    let mut host = [0.0f32];
    gpu.download(&flag, &mut host)?;
    Ok(host[0] != 0.0)
}

/// `index` must name an entry of `out`, the buffer the sums of squares go into.
fn index_within(op: &'static str, out: &GpuBuffer, index: usize) -> Result<()> {
    if index < out.len {
        return Ok(());
    }
    Err(EngineError::BufferLength {
        op,
        what: "out (index past its end)",
        expected: index + 1,
        got: out.len,
    })
}

/// Readies the f32 buffer of sums of squares. Earlier calls may have written other
/// entries: a backed block is kept, so it must hold f32 already.
fn sums_output(gpu: &GpuBackend, op: &'static str, out: &mut GpuBuffer) -> Result<()> {
    if out.is_backed() {
        gpu.require_f32(op, "out", out)
    } else {
        gpu.output(out, Precision::Fp32)
    }
}

/// The address of `buf`'s values as f32: its own, or that of a widened copy kept in
/// `widened` until the launch that reads it has been enqueued.
fn f32_address(
    gpu: &GpuBackend,
    buf: &GpuBuffer,
    widened: &mut Vec<GpuBuffer>,
) -> Result<DevicePtr> {
    if buf.storage == Precision::Fp32 {
        return Ok(buf.ptr);
    }
    let wide = gpu.convert(buf, Precision::Fp32)?;
    let ptr = wide.ptr;
    widened.push(wide);
    Ok(ptr)
}
