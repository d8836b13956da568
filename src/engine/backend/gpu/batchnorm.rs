//! Batch norm over NHWC rows: per-channel sums in slabs of rows, a finalize kernel for the
//! per-channel coefficients, then one element-wise pass that may add the ReLU, or the
//! residual and the ReLU, of the end of a residual block.

use super::buffer::GpuBuffer;
use super::driver::{DevicePtr, KernelArg};
use super::enqueue::{dims_fit_i32, i32_arg, i64_arg};
use super::source::storage_kernel;
use super::{launch, GpuBackend};
use crate::engine::backend::{
    unfused, Backend, BatchNormBuffers, BatchNormGrads, BatchNormParams, BatchNormSaved,
};
use crate::engine::{EngineError, Precision, Result};

/// What batch norm's element-wise pass applies after the affine map.
#[derive(Clone, Copy)]
pub(super) enum BnEpilogue<'a> {
    None,
    Relu,
    /// ReLU of the sum with this residual (in the storage format).
    AddRelu(&'a GpuBuffer),
}

/// What [`partial_sums`] adds up per channel over a slab of rows.
enum BnSums {
    /// Σ(x − x₀) and Σ(x − x₀)², about the first row x₀: the forward's batch statistics.
    Statistics,
    /// Σdy and Σdy·(x − mean): the backward's, with dy masked by `relu_out > 0` when given.
    Gradient {
        dy: DevicePtr,
        mean: DevicePtr,
        relu_out: Option<DevicePtr>,
    },
}

/// Launches the per-channel partial sums of `x` (in the storage format) over slabs of
/// [`launch::BN_ROWS_PER_SLAB`] rows; returns the slab count and the two f32
/// `[slabs, c]` partials that a finalize kernel reduces.
fn partial_sums(
    gpu: &GpuBackend,
    rows: usize,
    c: usize,
    x: DevicePtr,
    sums: BnSums,
) -> Result<(usize, GpuBuffer, GpuBuffer)> {
    // The kernel reads the pointers its mode needs; the others only have to be valid.
    let (dy, mean, relu_out, mode) = match sums {
        BnSums::Statistics => (x, x, x, 0),
        BnSums::Gradient { dy, mean, relu_out } => (
            dy,
            mean,
            relu_out.unwrap_or(x),
            if relu_out.is_some() { 2 } else { 1 },
        ),
    };
    let slabs = launch::bn_slabs(rows);
    let p1 = gpu.scratch(slabs * c, Precision::Fp32)?;
    let p2 = gpu.scratch(slabs * c, Precision::Fp32)?;
    gpu.launch(
        &storage_kernel("bn_partial_sums", gpu.precision),
        launch::bn_partials(rows, c),
        &[
            KernelArg::Ptr(x),
            KernelArg::Ptr(dy),
            KernelArg::Ptr(mean),
            KernelArg::Ptr(relu_out),
            i64_arg(rows),
            i32_arg(c),
            i32_arg(launch::BN_ROWS_PER_SLAB),
            KernelArg::I32(mode),
            KernelArg::Ptr(p1.ptr),
            KernelArg::Ptr(p2.ptr),
        ],
    )?;
    Ok((slabs, p1, p2))
}

pub(super) fn add_relu_forward_train(
    gpu: &GpuBackend,
    p: &BatchNormParams,
    x: &GpuBuffer,
    residual: &GpuBuffer,
    bn: &mut BatchNormBuffers<GpuBuffer>,
    saved: &mut BatchNormSaved<GpuBuffer>,
    y: &mut GpuBuffer,
) -> Result<()> {
    if !gpu.fused_bn {
        return unfused::batch_norm_add_relu_forward_train(gpu, p, x, residual, bn, saved, y);
    }
    forward_train(gpu, p, x, bn, saved, y, BnEpilogue::AddRelu(residual))
}

pub(super) fn add_relu_forward_eval(
    gpu: &GpuBackend,
    p: &BatchNormParams,
    x: &GpuBuffer,
    residual: &GpuBuffer,
    bn: &BatchNormBuffers<GpuBuffer>,
    y: &mut GpuBuffer,
) -> Result<()> {
    if !gpu.fused_bn {
        return unfused::batch_norm_add_relu_forward_eval(gpu, p, x, residual, bn, y);
    }
    forward_eval(gpu, p, x, bn, y, BnEpilogue::AddRelu(residual))
}

#[allow(clippy::too_many_arguments)]
pub(super) fn add_relu_backward(
    gpu: &GpuBackend,
    p: &BatchNormParams,
    x: &GpuBuffer,
    y: &GpuBuffer,
    dy: &mut GpuBuffer,
    gamma: &GpuBuffer,
    saved: &BatchNormSaved<GpuBuffer>,
    dx: &mut GpuBuffer,
    grads: &mut BatchNormGrads<GpuBuffer>,
) -> Result<()> {
    if !gpu.fused_bn {
        return unfused::batch_norm_add_relu_backward(gpu, p, x, y, dy, gamma, saved, dx, grads);
    }
    gpu.check("batch_norm_add_relu_backward", "dy", dy, dy.len)?;
    // The masked gradient is written over dy in the storage format.
    if dy.storage != gpu.precision {
        let mut stored = gpu.alloc(dy.len)?;
        gpu.convert_into(dy, &mut stored, gpu.precision)?;
        *dy = stored;
    }
    let masked = Some(dy.ptr);
    backward(gpu, p, x, Some(y), masked, dy, gamma, saved, dx, grads)
}

pub(super) fn forward_train(
    gpu: &GpuBackend,
    p: &BatchNormParams,
    x: &GpuBuffer,
    bn: &mut BatchNormBuffers<GpuBuffer>,
    saved: &mut BatchNormSaved<GpuBuffer>,
    y: &mut GpuBuffer,
    epilogue: BnEpilogue,
) -> Result<()> {
    const OP: &str = "batch_norm_forward_train";
    p.validate(true)?;
    let (rows, c) = (p.rows, p.channels);
    gpu.check(OP, "x", x, rows * c)?;
    gpu.check_output(OP, "y", y, rows * c)?;
    check_bn(gpu, OP, bn, c)?;
    gpu.check_output(OP, "saved mean", &saved.mean, c)?;
    gpu.check_output(OP, "saved inv_std", &saved.inv_std, c)?;
    dims_fit_i32(OP, &[c, launch::bn_slabs(rows)])?;
    let s = gpu.precision;
    let x = gpu.in_format(x, s)?;
    gpu.output(&mut saved.mean, Precision::Fp32)?;
    gpu.output(&mut saved.inv_std, Precision::Fp32)?;
    let (slabs, p1, p2) = partial_sums(gpu, rows, c, x.ptr, BnSums::Statistics)?;
    let scale = gpu.scratch(c, Precision::Fp32)?;
    let shift = gpu.scratch(c, Precision::Fp32)?;
    gpu.launch(
        &storage_kernel("bn_forward_finalize", s),
        launch::one_thread_each(c),
        &[
            KernelArg::Ptr(p1.ptr),
            KernelArg::Ptr(p2.ptr),
            i32_arg(slabs),
            i64_arg(rows),
            i32_arg(c),
            KernelArg::Ptr(x.ptr),
            KernelArg::Ptr(bn.gamma.ptr),
            KernelArg::Ptr(bn.beta.ptr),
            KernelArg::Ptr(bn.running_mean.ptr),
            KernelArg::Ptr(bn.running_var.ptr),
            KernelArg::F32(p.eps),
            KernelArg::F32(p.momentum),
            KernelArg::Ptr(saved.mean.ptr),
            KernelArg::Ptr(saved.inv_std.ptr),
            KernelArg::Ptr(scale.ptr),
            KernelArg::Ptr(shift.ptr),
        ],
    )?;
    channel_affine(gpu, OP, &x, &scale, &shift, y, rows, c, epilogue)
}

pub(super) fn forward_eval(
    gpu: &GpuBackend,
    p: &BatchNormParams,
    x: &GpuBuffer,
    bn: &BatchNormBuffers<GpuBuffer>,
    y: &mut GpuBuffer,
    epilogue: BnEpilogue,
) -> Result<()> {
    const OP: &str = "batch_norm_forward_eval";
    p.validate(false)?;
    let (rows, c) = (p.rows, p.channels);
    gpu.check(OP, "x", x, rows * c)?;
    gpu.check_output(OP, "y", y, rows * c)?;
    check_bn(gpu, OP, bn, c)?;
    dims_fit_i32(OP, &[c])?;
    let x = gpu.in_format(x, gpu.precision)?;
    let scale = gpu.scratch(c, Precision::Fp32)?;
    let shift = gpu.scratch(c, Precision::Fp32)?;
    gpu.launch(
        "bn_eval_coefficients",
        launch::one_thread_each(c),
        &[
            KernelArg::Ptr(bn.gamma.ptr),
            KernelArg::Ptr(bn.beta.ptr),
            KernelArg::Ptr(bn.running_mean.ptr),
            KernelArg::Ptr(bn.running_var.ptr),
            KernelArg::F32(p.eps),
            i32_arg(c),
            KernelArg::Ptr(scale.ptr),
            KernelArg::Ptr(shift.ptr),
        ],
    )?;
    channel_affine(gpu, OP, &x, &scale, &shift, y, rows, c, epilogue)
}

/// The batch-norm backward, through the ReLU whose output was `relu_out` when given;
/// with `masked_dy`, dy masked by that ReLU is also stored there (dy's own buffer, in
/// the storage format: the residual's gradient at the end of a block).
#[allow(clippy::too_many_arguments)]
pub(super) fn backward(
    gpu: &GpuBackend,
    p: &BatchNormParams,
    x: &GpuBuffer,
    relu_out: Option<&GpuBuffer>,
    masked_dy: Option<DevicePtr>,
    dy: &GpuBuffer,
    gamma: &GpuBuffer,
    saved: &BatchNormSaved<GpuBuffer>,
    dx: &mut GpuBuffer,
    grads: &mut BatchNormGrads<GpuBuffer>,
) -> Result<()> {
    const OP: &str = "batch_norm_backward";
    p.validate(true)?;
    let (rows, c) = (p.rows, p.channels);
    gpu.check(OP, "x", x, rows * c)?;
    gpu.check(OP, "dy", dy, rows * c)?;
    gpu.check_output(OP, "dx", dx, rows * c)?;
    gpu.check(OP, "gamma", gamma, c)?;
    gpu.check(OP, "saved mean", &saved.mean, c)?;
    gpu.check(OP, "saved inv_std", &saved.inv_std, c)?;
    gpu.check_output(OP, "dgamma", &grads.gamma, c)?;
    gpu.check_output(OP, "dbeta", &grads.beta, c)?;
    if let Some(y) = relu_out {
        gpu.check(OP, "relu output", y, rows * c)?;
    }
    dims_fit_i32(OP, &[c, launch::bn_slabs(rows)])?;
    let s = gpu.precision;
    let x = gpu.in_format(x, s)?;
    let dy = gpu.in_format(dy, s)?;
    let relu_out = match relu_out {
        Some(y) => Some(gpu.in_format(y, s)?),
        None => None,
    };
    let relu_out = relu_out.as_deref();
    gpu.output(dx, s)?;
    gpu.output(&mut grads.gamma, Precision::Fp32)?;
    gpu.output(&mut grads.beta, Precision::Fp32)?;
    let sums = BnSums::Gradient {
        dy: dy.ptr,
        mean: saved.mean.ptr,
        relu_out: relu_out.map(|y| y.ptr),
    };
    let (slabs, p1, p2) = partial_sums(gpu, rows, c, x.ptr, sums)?;
    let coef = gpu.scratch(3 * c, Precision::Fp32)?;
    gpu.launch(
        "bn_backward_finalize",
        launch::one_thread_each(c),
        &[
            KernelArg::Ptr(p1.ptr),
            KernelArg::Ptr(p2.ptr),
            i32_arg(slabs),
            i64_arg(rows),
            i32_arg(c),
            KernelArg::Ptr(gamma.ptr),
            KernelArg::Ptr(saved.mean.ptr),
            KernelArg::Ptr(saved.inv_std.ptr),
            KernelArg::Ptr(grads.gamma.ptr),
            KernelArg::Ptr(grads.beta.ptr),
            KernelArg::Ptr(coef.ptr),
            KernelArg::Ptr(coef.at(c)),
            KernelArg::Ptr(coef.at(2 * c)),
        ],
    )?;
    dims_fit_i32(OP, &[rows * c])?;
    let mut args = vec![KernelArg::Ptr(x.ptr), KernelArg::Ptr(dy.ptr)];
    if let Some(y) = relu_out {
        args.push(KernelArg::Ptr(y.ptr));
    }
    args.extend([
        KernelArg::Ptr(coef.ptr),
        KernelArg::Ptr(coef.at(c)),
        KernelArg::Ptr(coef.at(2 * c)),
        KernelArg::Ptr(dx.ptr),
        i32_arg(rows * c),
        i32_arg(c),
    ]);
    if let Some(masked) = masked_dy {
        if masked != dy.ptr {
            return Err(EngineError::InvalidParameter {
                op: OP,
                reason: "the masked gradient goes into dy's own buffer".into(),
            });
        }
    }
    let kernel = match (relu_out.is_some(), masked_dy.is_some()) {
        (true, true) => "bn_backward_dx_relu_residual",
        (true, false) => "bn_backward_dx_relu",
        (false, _) => "bn_backward_dx",
    };
    gpu.elementwise_vec4(&storage_kernel(kernel, s), rows * c, &args)
}

fn check_bn(
    gpu: &GpuBackend,
    op: &'static str,
    bn: &BatchNormBuffers<GpuBuffer>,
    c: usize,
) -> Result<()> {
    gpu.check(op, "gamma", &bn.gamma, c)?;
    gpu.check(op, "beta", &bn.beta, c)?;
    gpu.check(op, "running mean", &bn.running_mean, c)?;
    gpu.check(op, "running var", &bn.running_var, c)
}

#[allow(clippy::too_many_arguments)]
fn channel_affine(
    gpu: &GpuBackend,
    op: &'static str,
    x: &GpuBuffer,
    scale: &GpuBuffer,
    shift: &GpuBuffer,
    y: &mut GpuBuffer,
    rows: usize,
    c: usize,
    epilogue: BnEpilogue,
) -> Result<()> {
    dims_fit_i32("batch_norm", &[rows * c])?;
    let residual = match epilogue {
        BnEpilogue::AddRelu(r) => {
            gpu.check(op, "residual", r, rows * c)?;
            Some(gpu.in_format(r, x.storage)?)
        }
        _ => None,
    };
    gpu.output(y, x.storage)?;
    let kernel = match epilogue {
        BnEpilogue::None => "channel_affine",
        BnEpilogue::Relu => "channel_affine_relu",
        BnEpilogue::AddRelu(_) => "channel_affine_add_relu",
    };
    let mut args = vec![
        KernelArg::Ptr(x.ptr),
        KernelArg::Ptr(scale.ptr),
        KernelArg::Ptr(shift.ptr),
    ];
    if let Some(r) = &residual {
        args.push(KernelArg::Ptr(r.ptr));
    }
    args.extend([KernelArg::Ptr(y.ptr), i32_arg(rows * c), i32_arg(c)]);
    gpu.elementwise_vec4(&storage_kernel(kernel, x.storage), rows * c, &args)
}
