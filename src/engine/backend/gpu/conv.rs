//! Convolutions: 1×1 stride-1 ones as one GEMM; the rest through the DNN library, the
//! implicit-GEMM kernels, or im2col + GEMM in chunks of whole images, as the backend's
//! [`ConvPath`] says.

use super::buffer::{GpuBuffer, Operand};
use super::driver::{DevicePtr, DnnConv, DnnConvOp, DriverError, Gemm, KernelArg};
use super::enqueue::{dims_fit_i32, i32_arg, i64_arg};
use super::options::ConvPath;
use super::source::storage_kernel;
use super::{conv_gemm, launch, GpuBackend, IM2COL_BUDGET_ELEMS};
use crate::engine::backend::Conv2dParams;
use crate::engine::{EngineError, Precision, Result};

pub(super) fn forward(
    gpu: &GpuBackend,
    p: &Conv2dParams,
    x: &GpuBuffer,
    w: &GpuBuffer,
    y: &mut GpuBuffer,
) -> Result<()> {
    const OP: &str = DATA_FORWARD.op;
    let Some(x) = start_data_pass(gpu, &DATA_FORWARD, p, x, w, y)? else {
        return Ok(());
    };
    let s = gpu.precision;
    let cout = p.out_c;
    let rows_per_image = p.out_h() * p.out_w();
    let w = gpu.in_format(w, s)?;
    if gpu.conv == ConvPath::ImplicitGemm {
        return implicit_conv(gpu, OP, conv_gemm::Pass::Forward, p, x.ptr, w.ptr, y.ptr);
    }
    let (chunk, col) = conv_chunks(gpu, p, s)?;
    for first in (0..p.batch).step_by(chunk) {
        let images = chunk.min(p.batch - first);
        im2col(gpu, p, &x, &col, first, images)?;
        gpu.gemm(
            conv_gemm::forward(
                p,
                images * rows_per_image,
                col.ptr,
                w.ptr,
                y.at(first * rows_per_image * cout),
            )
            .with_types(s, s),
        )?;
    }
    Ok(())
}

pub(super) fn backward_data(
    gpu: &GpuBackend,
    p: &Conv2dParams,
    dy: &GpuBuffer,
    w: &GpuBuffer,
    dx: &mut GpuBuffer,
) -> Result<()> {
    const OP: &str = DATA_BACKWARD.op;
    let Some(dy) = start_data_pass(gpu, &DATA_BACKWARD, p, dy, w, dx)? else {
        return Ok(());
    };
    let s = gpu.precision;
    let cout = p.out_c;
    let rows_per_image = p.out_h() * p.out_w();
    let w = gpu.in_format(w, s)?;
    if gpu.conv == ConvPath::ImplicitGemm {
        // Summed in f32 and rounded once, as col2im does.
        return implicit_conv(
            gpu,
            OP,
            conv_gemm::Pass::BackwardData,
            p,
            dy.ptr,
            w.ptr,
            dx.ptr,
        );
    }
    // The column gradient stays f32 so that col2im sums before the one rounding.
    let (chunk, dcol) = conv_chunks(gpu, p, Precision::Fp32)?;
    for first in (0..p.batch).step_by(chunk) {
        let images = chunk.min(p.batch - first);
        gpu.gemm(
            conv_gemm::backward_data(
                p,
                images * rows_per_image,
                dy.at(first * rows_per_image * cout),
                w.ptr,
                dcol.ptr,
            )
            .with_types(s, Precision::Fp32),
        )?;
        let total = images * p.in_h * p.in_w * p.in_c;
        dims_fit_i32(OP, &[total])?;
        let mut args = vec![KernelArg::Ptr(dcol.ptr), KernelArg::Ptr(dx.ptr)];
        args.extend(conv_args(p, first, images));
        gpu.elementwise(&storage_kernel("col2im", s), total, &args)?;
    }
    Ok(())
}

/// An operand's name in errors and the length a convolution's shape gives it.
type ConvOperand = (&'static str, fn(&Conv2dParams) -> usize);

/// What tells the two passes that read activations and weights and write activations
/// (the forward and the backward data) apart where they share their start.
struct DataPass {
    /// The op's name in errors.
    op: &'static str,
    /// The source's and the destination's names in errors, and the lengths they must have.
    operands: [ConvOperand; 2],
    /// The DNN library's pass and its name in timings.
    dnn: (DnnConvOp, &'static str),
    /// The pointwise case's one GEMM, from `(p, rows, src, w, dst)`.
    gemm: fn(&Conv2dParams, usize, DevicePtr, DevicePtr, DevicePtr) -> Gemm,
}

const DATA_FORWARD: DataPass = DataPass {
    op: "conv2d_forward",
    operands: [
        ("x", Conv2dParams::input_len),
        ("y", Conv2dParams::output_len),
    ],
    dnn: (DnnConvOp::Forward, "cudnn forward"),
    gemm: conv_gemm::forward,
};

const DATA_BACKWARD: DataPass = DataPass {
    op: "conv2d_backward_data",
    operands: [
        ("dy", Conv2dParams::output_len),
        ("dx", Conv2dParams::input_len),
    ],
    dnn: (DnnConvOp::BackwardData, "cudnn backward data"),
    gemm: conv_gemm::backward_data,
};

/// Checks the shape, `src` (read), the f32 weights `w` and `dst` (written), and readies `dst` in the storage format. A pointwise
/// convolution, or any on the DNN path, runs here and gives `None`; otherwise the caller's
/// own path goes on from `src` in the storage format.
fn start_data_pass<'a>(
    gpu: &GpuBackend,
    pass: &DataPass,
    p: &Conv2dParams,
    src: &'a GpuBuffer,
    w: &GpuBuffer,
    dst: &mut GpuBuffer,
) -> Result<Option<Operand<'a>>> {
    p.validate()?;
    let [(src_name, src_len), (dst_name, dst_len)] = pass.operands;
    gpu.check(pass.op, src_name, src, src_len(p))?;
    gpu.check(pass.op, "w", w, p.weight_len())?;
    gpu.check_output(pass.op, dst_name, dst, dst_len(p))?;
    gpu.require_f32(pass.op, "w", w)?;
    let s = gpu.precision;
    let src = gpu.in_format(src, s)?;
    gpu.output(dst, s)?;
    if p.is_pointwise() {
        let w = gpu.in_format(w, s)?;
        let rows = p.batch * p.out_h() * p.out_w();
        gpu.gemm((pass.gemm)(p, rows, src.ptr, w.ptr, dst.ptr).with_types(s, s))?;
        return Ok(None);
    }
    if gpu.conv == ConvPath::Dnn {
        let (op, label) = pass.dnn;
        let w_dnn = weights_for_dnn(gpu, p, w, s)?;
        // The DNN library names the activations by the forward's x and y.
        let (x, y) = match op {
            DnnConvOp::Forward => (src.ptr, dst.ptr),
            _ => (dst.ptr, src.ptr),
        };
        let conv = DnnConv {
            op,
            shape: *p,
            x,
            w: w_dnn.ptr,
            y,
            dtype: s,
        };
        dnn_conv(gpu, label, conv)?;
        return Ok(None);
    }
    Ok(Some(src))
}

pub(super) fn backward_filter(
    gpu: &GpuBackend,
    p: &Conv2dParams,
    x: &GpuBuffer,
    dy: &GpuBuffer,
    dw: &mut GpuBuffer,
) -> Result<()> {
    const OP: &str = "conv2d_backward_filter";
    p.validate()?;
    gpu.check(OP, "x", x, p.input_len())?;
    gpu.check(OP, "dy", dy, p.output_len())?;
    gpu.check_output(OP, "dw", dw, p.weight_len())?;
    let s = gpu.precision;
    let x = gpu.in_format(x, s)?;
    let dy = gpu.in_format(dy, s)?;
    gpu.output(dw, Precision::Fp32)?;
    let cout = p.out_c;
    let rows_per_image = p.out_h() * p.out_w();
    // 16-bit products accumulate in an f32 dw, rounded once at the end, as the
    // gradient of a 16-bit convolution is before it reaches the f32 master weight.
    if p.is_pointwise() {
        gpu.gemm(
            conv_gemm::backward_filter(p, p.batch * rows_per_image, x.ptr, dy.ptr, dw.ptr, false)
                .with_types(s, Precision::Fp32),
        )?;
        return gpu.round_to_storage(dw);
    }
    if gpu.conv == ConvPath::Dnn {
        let dw_dnn = gpu.scratch(p.weight_len(), s)?;
        dnn_conv(
            gpu,
            "cudnn backward filter",
            DnnConv {
                op: DnnConvOp::BackwardFilter,
                shape: *p,
                x: x.ptr,
                w: dw_dnn.ptr,
                y: dy.ptr,
                dtype: s,
            },
        )?;
        dims_fit_i32(OP, &[p.weight_len()])?;
        return gpu.elementwise(
            &storage_kernel("ohwi_to_hwio", s),
            p.weight_len(),
            &[
                KernelArg::Ptr(dw_dnn.ptr),
                KernelArg::Ptr(dw.ptr),
                i32_arg(p.kernel_h * p.kernel_w),
                i32_arg(p.in_c),
                i32_arg(p.out_c),
            ],
        );
    }
    if gpu.conv == ConvPath::ImplicitGemm {
        implicit_conv(
            gpu,
            OP,
            conv_gemm::Pass::BackwardFilter,
            p,
            x.ptr,
            dy.ptr,
            dw.ptr,
        )?;
        return gpu.round_to_storage(dw);
    }
    let (chunk, col) = conv_chunks(gpu, p, s)?;
    for first in (0..p.batch).step_by(chunk) {
        let images = chunk.min(p.batch - first);
        im2col(gpu, p, &x, &col, first, images)?;
        gpu.gemm(
            conv_gemm::backward_filter(
                p,
                images * rows_per_image,
                col.ptr,
                dy.at(first * rows_per_image * cout),
                dw.ptr,
                first > 0,
            )
            .with_types(s, Precision::Fp32),
        )?;
    }
    gpu.round_to_storage(dw)
}

/// Weights in the DNN library's order (output channel slowest) and in `format`.
fn weights_for_dnn(
    gpu: &GpuBackend,
    p: &Conv2dParams,
    w: &GpuBuffer,
    format: Precision,
) -> Result<GpuBuffer> {
    gpu.require_f32("conv2d", "w", w)?;
    let out = gpu.scratch(p.weight_len(), format)?;
    dims_fit_i32("conv2d", &[p.weight_len()])?;
    gpu.elementwise(
        &storage_kernel("hwio_to_ohwi", format),
        p.weight_len(),
        &[
            KernelArg::Ptr(w.ptr),
            KernelArg::Ptr(out.ptr),
            i32_arg(p.kernel_h * p.kernel_w),
            i32_arg(p.in_c),
            i32_arg(p.out_c),
        ],
    )?;
    Ok(out)
}

fn dnn_conv(gpu: &GpuBackend, name: &str, conv: DnnConv) -> Result<()> {
    gpu.timed(name, || {
        let ran = match gpu.driver().dnn_conv(&conv) {
            // The DNN library takes its workspace from the runtime, not from the allocator:
            // blocks the allocator caches may be what stands in its way.
            Err(DriverError::OutOfMemory { .. }) => {
                gpu.allocator.release_cached().map_err(|e| gpu.device(e))?;
                gpu.driver()
                    .dnn_conv(&conv)
                    .map_err(|e| EngineError::Device {
                        backend: gpu.name.clone(),
                        reason: format!(
                            "{name}: the DNN library's workspace, with the allocator's cache \
                             released: {e}"
                        ),
                    })?
            }
            other => other.map_err(|e| gpu.device(e))?,
        };
        match ran {
            true => Ok(()),
            false => Err(gpu.device(DriverError::InvalidArgument(
                "the driver lost its DNN library".into(),
            ))),
        }
    })
}

/// The shape arguments of the im2col/col2im kernels, after `first_image` the number of
/// images (or, for the whole-row im2col, output rows) the launch covers.
fn conv_args(p: &Conv2dParams, first_image: usize, count: usize) -> Vec<KernelArg> {
    [
        first_image,
        count,
        p.in_h,
        p.in_w,
        p.in_c,
        p.kernel_h,
        p.kernel_w,
        p.stride,
        p.padding,
        p.out_h(),
        p.out_w(),
    ]
    .iter()
    .map(|&v| i32_arg(v))
    .collect()
}

/// Image chunks of a non-pointwise convolution and the column scratch they share, in
/// `format`.
fn conv_chunks(
    gpu: &GpuBackend,
    p: &Conv2dParams,
    format: Precision,
) -> Result<(usize, GpuBuffer)> {
    let k = p.kernel_h * p.kernel_w * p.in_c;
    let rows_per_image = p.out_h() * p.out_w();
    let images = launch::im2col_images(p.batch, rows_per_image, k, IM2COL_BUDGET_ELEMS);
    let col = gpu.scratch(images * rows_per_image * k, format)?;
    Ok((images, col))
}

/// One pass of a convolution by its implicit-GEMM kernel (the form for this
/// backend's storage), its operands `a` and `b` in that storage: `c` is y or dx in
/// the storage format, or the f32 dW. The filter gradient's long depth is split over
/// more blocks when its output alone has too few tiles to fill the device, the splits
/// then summed in order.
fn implicit_conv(
    gpu: &GpuBackend,
    op: &'static str,
    pass: conv_gemm::Pass,
    p: &Conv2dParams,
    a: DevicePtr,
    b: DevicePtr,
    c: DevicePtr,
) -> Result<()> {
    dims_fit_i32(op, &[p.input_len(), p.output_len(), p.weight_len()])?;
    let (rows, cols, depth) = pass.dims(p);
    let (splits, split_depth) = if pass == conv_gemm::Pass::BackwardFilter {
        launch::implicit_splits(rows, cols, depth, gpu.driver().info().multiprocessors)
    } else {
        (
            1,
            depth.div_ceil(launch::IMPLICIT_SLICE).max(1) * launch::IMPLICIT_SLICE,
        )
    };
    dims_fit_i32(op, &[split_depth])?;
    let partial = match splits {
        1 => None,
        _ => Some(gpu.scratch(splits * rows * cols, Precision::Fp32)?),
    };
    let mut args = vec![
        KernelArg::Ptr(a),
        KernelArg::Ptr(b),
        KernelArg::Ptr(partial.as_ref().map_or(c, |buf| buf.ptr)),
    ];
    args.extend(
        [
            p.batch,
            p.in_h,
            p.in_w,
            p.in_c,
            p.out_c,
            p.kernel_h,
            p.kernel_w,
            p.stride,
            p.padding,
            p.out_h(),
            p.out_w(),
            split_depth,
        ]
        .map(i32_arg),
    );
    gpu.launch(
        &storage_kernel(pass.implicit_kernel(), gpu.precision),
        launch::implicit_gemm(rows, cols, splits),
        &args,
    )?;
    let Some(partial) = partial else {
        return Ok(());
    };
    gpu.elementwise(
        "conv_split_sum",
        rows * cols,
        &[
            KernelArg::Ptr(partial.ptr),
            KernelArg::Ptr(c),
            i32_arg(splits),
            i64_arg(rows * cols),
        ],
    )
}

/// The column matrix of `images` images from `first`, in x's format.
fn im2col(
    gpu: &GpuBackend,
    p: &Conv2dParams,
    x: &GpuBuffer,
    col: &GpuBuffer,
    first: usize,
    images: usize,
) -> Result<()> {
    let k = p.kernel_h * p.kernel_w * p.in_c;
    let rows = images * p.out_h() * p.out_w();
    let mut args = vec![KernelArg::Ptr(x.ptr), KernelArg::Ptr(col.ptr)];
    if p.in_c >= launch::IM2COL_ROWS_MIN_CHANNELS {
        args.extend(conv_args(p, first, rows));
        let shape = launch::block_per_output_row(rows, p.kernel_w * p.in_c);
        return gpu.launch(&storage_kernel("im2col_rows", x.storage), shape, &args);
    }
    args.extend(conv_args(p, first, images));
    gpu.elementwise(&storage_kernel("im2col", x.storage), rows * k, &args)
}
