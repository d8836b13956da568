//! The fully connected classifier, in f32 whatever the activations' format: a bias
//! broadcast and a GEMM forward, three GEMMs' worth of gradients backward.

use super::buffer::GpuBuffer;
use super::driver::{Gemm, GemmTypes, KernelArg, Transpose};
use super::enqueue::{dims_fit_i32, i32_arg, i64_arg};
use super::{launch, GpuBackend};
use crate::engine::backend::LinearParams;
use crate::engine::{Precision, Result};

pub(super) fn forward(
    gpu: &GpuBackend,
    p: &LinearParams,
    x: &GpuBuffer,
    w: &GpuBuffer,
    b: &GpuBuffer,
    y: &mut GpuBuffer,
) -> Result<()> {
    const OP: &str = "linear_forward";
    p.validate()?;
    let (batch, fin, fout) = (p.batch, p.in_features, p.out_features);
    gpu.check(OP, "x", x, batch * fin)?;
    gpu.check(OP, "w", w, fout * fin)?;
    gpu.check(OP, "b", b, fout)?;
    gpu.check_output(OP, "y", y, batch * fout)?;
    dims_fit_i32(OP, &[fout])?;
    gpu.require_f32(OP, "w", w)?;
    gpu.require_f32(OP, "b", b)?;
    // The classifier is f32: its input is widened, its logits are f32.
    let x = gpu.stored_as_f32(x)?;
    gpu.output(y, Precision::Fp32)?;
    gpu.elementwise(
        "broadcast_rows",
        batch * fout,
        &[
            KernelArg::Ptr(b.ptr),
            KernelArg::Ptr(y.ptr),
            i64_arg(batch),
            i32_arg(fout),
        ],
    )?;
    gpu.gemm(Gemm {
        m: batch,
        n: fout,
        k: fin,
        a: x.ptr,
        lda: fin,
        trans_a: Transpose::No,
        b: w.ptr,
        ldb: fin,
        trans_b: Transpose::Yes,
        c: y.ptr,
        ldc: fout,
        alpha: 1.0,
        beta: 1.0,
        types: GemmTypes::F32,
    })
}

#[allow(clippy::too_many_arguments)]
pub(super) fn backward(
    gpu: &GpuBackend,
    p: &LinearParams,
    x: &GpuBuffer,
    w: &GpuBuffer,
    dy: &GpuBuffer,
    dx: Option<&mut GpuBuffer>,
    dw: &mut GpuBuffer,
    db: &mut GpuBuffer,
) -> Result<()> {
    const OP: &str = "linear_backward";
    p.validate()?;
    let (batch, fin, fout) = (p.batch, p.in_features, p.out_features);
    gpu.check(OP, "x", x, batch * fin)?;
    gpu.check(OP, "w", w, fout * fin)?;
    gpu.check(OP, "dy", dy, batch * fout)?;
    gpu.check_output(OP, "dw", dw, fout * fin)?;
    gpu.check_output(OP, "db", db, fout)?;
    dims_fit_i32(OP, &[fout])?;
    gpu.require_f32(OP, "w", w)?;
    let x = gpu.stored_as_f32(x)?;
    let dy = gpu.in_format(dy, Precision::Fp32)?;
    gpu.output(dw, Precision::Fp32)?;
    gpu.output(db, Precision::Fp32)?;
    gpu.gemm(Gemm {
        m: fout,
        n: fin,
        k: batch,
        a: dy.ptr,
        lda: fout,
        trans_a: Transpose::Yes,
        b: x.ptr,
        ldb: fin,
        trans_b: Transpose::No,
        c: dw.ptr,
        ldc: fin,
        alpha: 1.0,
        beta: 0.0,
        types: GemmTypes::F32,
    })?;
    gpu.launch(
        "column_sums",
        launch::one_thread_each(fout),
        &[
            KernelArg::Ptr(dy.ptr),
            KernelArg::Ptr(db.ptr),
            i64_arg(batch),
            i32_arg(fout),
        ],
    )?;
    if let Some(dx) = dx {
        gpu.check_output(OP, "dx", dx, batch * fin)?;
        // The input gradient is an activation gradient: computed in f32, then stored in
        // the activation format.
        let wide = if gpu.precision.is_reduced() {
            Some(gpu.scratch(batch * fin, Precision::Fp32)?)
        } else {
            gpu.output(dx, Precision::Fp32)?;
            None
        };
        let target = wide.as_ref().unwrap_or(dx);
        gpu.gemm(Gemm {
            m: batch,
            n: fin,
            k: fout,
            a: dy.ptr,
            lda: fout,
            trans_a: Transpose::No,
            b: w.ptr,
            ldb: fin,
            trans_b: Transpose::No,
            c: target.ptr,
            ldc: fin,
            alpha: 1.0,
            beta: 0.0,
            types: GemmTypes::F32,
        })?;
        if let Some(wide) = wide {
            gpu.convert_into(&wide, dx, gpu.precision)?;
        }
    }
    Ok(())
}
