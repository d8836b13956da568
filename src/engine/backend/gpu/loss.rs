//! Softmax cross entropy with label smoothing over f32 logits; labels out of range count
//! as padding and are left out of the mean.

use super::buffer::GpuBuffer;
use super::driver::{DevicePtr, KernelArg};
use super::enqueue::{dims_fit_i32, i32_arg};
use super::{launch, GpuBackend};
use crate::engine::backend::CrossEntropyParams;
use crate::engine::{Precision, Result};

pub(super) fn forward(
    gpu: &GpuBackend,
    p: &CrossEntropyParams,
    logits: &GpuBuffer,
    labels: &GpuBuffer,
    loss: &mut GpuBuffer,
    correct: &mut GpuBuffer,
) -> Result<()> {
    const OP: &str = "cross_entropy_forward";
    p.validate()?;
    gpu.check(OP, "logits", logits, p.batch * p.classes)?;
    gpu.check(OP, "labels", labels, p.batch)?;
    gpu.check_output(OP, "loss", loss, 1)?;
    gpu.check_output(OP, "correct", correct, p.batch)?;
    dims_fit_i32(OP, &[p.batch, p.classes])?;
    let logits = gpu.in_format(logits, Precision::Fp32)?;
    gpu.require_f32(OP, "labels", labels)?;
    gpu.output(loss, Precision::Fp32)?;
    gpu.output(correct, Precision::Fp32)?;
    let count = valid_labels(gpu, p, labels)?;
    let sample_loss = gpu.scratch(p.batch, Precision::Fp32)?;
    per_sample(
        gpu,
        "ce_forward",
        p,
        [logits.ptr, labels.ptr],
        [sample_loss.ptr, correct.ptr],
    )?;
    gpu.launch(
        "ce_mean",
        launch::single_block(),
        &[
            KernelArg::Ptr(sample_loss.ptr),
            i32_arg(p.batch),
            KernelArg::Ptr(count.ptr),
            KernelArg::Ptr(loss.ptr),
        ],
    )
}

pub(super) fn backward(
    gpu: &GpuBackend,
    p: &CrossEntropyParams,
    logits: &GpuBuffer,
    labels: &GpuBuffer,
    dlogits: &mut GpuBuffer,
) -> Result<()> {
    const OP: &str = "cross_entropy_backward";
    p.validate()?;
    gpu.check(OP, "logits", logits, p.batch * p.classes)?;
    gpu.check(OP, "labels", labels, p.batch)?;
    gpu.check_output(OP, "dlogits", dlogits, p.batch * p.classes)?;
    dims_fit_i32(OP, &[p.batch, p.classes])?;
    let logits = gpu.in_format(logits, Precision::Fp32)?;
    gpu.require_f32(OP, "labels", labels)?;
    gpu.output(dlogits, Precision::Fp32)?;
    let count = valid_labels(gpu, p, labels)?;
    per_sample(
        gpu,
        "ce_backward",
        p,
        [logits.ptr, labels.ptr],
        [count.ptr, dlogits.ptr],
    )
}

/// The number of labels in range (the rest are padding), counted on the device into a
/// one-element f32 buffer that the mean divides by.
fn valid_labels(gpu: &GpuBackend, p: &CrossEntropyParams, labels: &GpuBuffer) -> Result<GpuBuffer> {
    let count = gpu.scratch(1, Precision::Fp32)?;
    gpu.launch(
        "ce_count_valid",
        launch::single_block(),
        &[
            KernelArg::Ptr(labels.ptr),
            i32_arg(p.batch),
            KernelArg::Ptr(count.ptr),
        ],
    )?;
    Ok(count)
}

/// Launches `kernel` with one block per sample over `[logits, labels]`, the class count
/// and the label smoothing, then the two pointers of `rest` in the order it takes them.
fn per_sample(
    gpu: &GpuBackend,
    kernel: &str,
    p: &CrossEntropyParams,
    [logits, labels]: [DevicePtr; 2],
    rest: [DevicePtr; 2],
) -> Result<()> {
    gpu.launch(
        kernel,
        launch::block_per_row(p.batch),
        &[
            KernelArg::Ptr(logits),
            KernelArg::Ptr(labels),
            i32_arg(p.classes),
            KernelArg::F32(p.label_smoothing),
            KernelArg::Ptr(rest[0]),
            KernelArg::Ptr(rest[1]),
        ],
    )
}
