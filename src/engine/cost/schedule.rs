//! The device-memory traffic and arithmetic of one training step, kernel by kernel, for
//! two schedules over the same network:
//!
//! - [`today`]: the kernel sequence the GPU backend launches now (conv, then BN partial
//!   sums, BN finalize and the affine (+ReLU) as separate passes; residual add and ReLU
//!   as their own passes; per-parameter optimizer kernels; 16-bit weight copies made per
//!   conv call). Convolutions are counted with each operand moved once, which is what
//!   cuDNN and the 1×1 GEMMs come close to; the im2col path moves more.
//! - [`floor`]: the fewest bytes a fused implementation must move. Every activation is
//!   written once; BN statistics come from the producing conv's epilogue; BN apply and
//!   ReLU are done on load by the consuming conv; a block's last BN, residual add and
//!   ReLU are one pass; the BN backward reads its input twice (statistics, then apply)
//!   because the apply needs the finished statistics; the optimizer touches each
//!   parameter once, in one multi-tensor pass that also writes the 16-bit copy.

use serde::Serialize;

use super::network::{ConvShape, NetworkShape};
use crate::engine::Precision;

/// The groups the per-kernel profile of a training step reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Convolutions other than 1×1 stride 1 (7×7 stem, 3×3, strided 1×1), all three passes.
    Conv,
    /// 1×1 stride-1 convolutions run as GEMMs, all three passes.
    Gemm1x1,
    /// The per-channel sum and sum-of-squares passes of BN, forward and backward.
    BnPartialSums,
    /// The elementwise BN backward that writes the input gradient.
    BnDx,
    /// Residual adds forward and the shortcut-gradient adds backward.
    ResidualAdd,
    /// The BN affine, with its ReLU where one follows.
    AffineRelu,
    /// ReLUs that run on their own (after the residual add, and their backward).
    Relu,
    /// The stem's max pool, forward and backward.
    Pool,
    /// The per-parameter norm and update kernels of LARS and momentum SGD.
    Optimizer,
    /// Global average pool, classifier, loss, BN finalize, 16-bit weight copies.
    Other,
}

impl Category {
    /// Every category, in the order reports list them.
    pub const ALL: [Category; 10] = [
        Category::Conv,
        Category::Gemm1x1,
        Category::BnPartialSums,
        Category::BnDx,
        Category::ResidualAdd,
        Category::AffineRelu,
        Category::Relu,
        Category::Pool,
        Category::Optimizer,
        Category::Other,
    ];

    /// The group's name as reports print it.
    pub fn label(self) -> &'static str {
        match self {
            Category::Conv => "convolutions",
            Category::Gemm1x1 => "1x1 GEMMs",
            Category::BnPartialSums => "BN partial sums",
            Category::BnDx => "BN dx",
            Category::ResidualAdd => "residual adds",
            Category::AffineRelu => "affine+ReLU",
            Category::Relu => "other ReLUs",
            Category::Pool => "max pool",
            Category::Optimizer => "optimizer",
            Category::Other => "other",
        }
    }
}

/// One kernel (or one fused pass) of a step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Kernel {
    /// What the kernel does, prefixed with its layer's state-dict name (`layer1.0.conv2 BN
    /// dx`).
    pub name: String,
    /// The group the kernel is reported under.
    pub category: Category,
    /// Floating-point operations, for the whole batch.
    pub flops: u64,
    /// Bytes the kernel reads from device memory.
    pub bytes_read: u64,
    /// Bytes the kernel writes to device memory.
    pub bytes_written: u64,
}

impl Kernel {
    /// Bytes read plus bytes written.
    pub fn bytes(&self) -> u64 {
        self.bytes_read + self.bytes_written
    }
}

/// Bytes per stored value.
struct Sizes {
    /// Activations and activation gradients.
    act: u64,
    /// Master weights, gradients, momentum and BN statistics.
    f32: u64,
}

impl Sizes {
    fn new(precision: Precision) -> Self {
        Sizes {
            act: if precision.is_reduced() { 2 } else { 4 },
            f32: 4,
        }
    }
}

struct Builder {
    kernels: Vec<Kernel>,
}

impl Builder {
    fn push(&mut self, name: String, category: Category, flops: u64, read: u64, written: u64) {
        self.kernels.push(Kernel {
            name,
            category,
            flops,
            bytes_read: read,
            bytes_written: written,
        });
    }
}

fn conv_category(conv: &ConvShape) -> Category {
    if conv.is_pointwise() {
        Category::Gemm1x1
    } else {
        Category::Conv
    }
}

/// Forward, data-gradient and weight-gradient passes of a conv with every operand moved
/// once: (flops, read, written) per pass. Weight gradients are written in f32.
fn conv_passes(
    conv: &ConvShape,
    batch: u64,
    s: &Sizes,
    weight_bytes: u64,
) -> [(String, u64, u64, u64); 3] {
    let flops = 2 * conv.macs() * batch;
    let x = conv.input_elems() * batch * s.act;
    let y = conv.output_elems() * batch * s.act;
    let w = conv.weights() * weight_bytes;
    [
        (format!("{} forward", conv.name), flops, x + w, y),
        (format!("{} data gradient", conv.name), flops, y + w, x),
        (
            format!("{} weight gradient", conv.name),
            flops,
            x + y,
            conv.weights() * s.f32,
        ),
    ]
}

fn push_conv(
    b: &mut Builder,
    conv: &ConvShape,
    batch: u64,
    s: &Sizes,
    weight_bytes: u64,
    pass: usize,
) {
    if pass == 1 && !conv.needs_input_grad {
        return;
    }
    let (name, flops, read, written) = conv_passes(conv, batch, s, weight_bytes)[pass].clone();
    b.push(name, conv_category(conv), flops, read, written);
}

/// Classifier, global pool and loss: the same in both schedules, and small.
fn push_head(b: &mut Builder, net: &NetworkShape, batch: u64, s: &Sizes, backward: bool) {
    let last = net
        .blocks
        .last()
        .map_or(net.stem.output_elems(), |bl| bl.output_elems())
        * batch;
    let features = (net.features as u64) * batch;
    let logits = (net.classes as u64) * batch;
    let fc_w = (net.features * net.classes) as u64;
    let fc_flops = 2 * fc_w * batch;
    if !backward {
        b.push(
            "global average pool forward".into(),
            Category::Other,
            last,
            last * s.act,
            features * s.f32,
        );
        b.push(
            "fc forward".into(),
            Category::Other,
            fc_flops,
            features * s.f32 + fc_w * s.f32,
            logits * s.f32,
        );
        b.push(
            "loss".into(),
            Category::Other,
            5 * logits,
            logits * s.f32,
            logits * s.f32,
        );
    } else {
        b.push(
            "fc backward".into(),
            Category::Other,
            2 * fc_flops,
            2 * logits * s.f32 + features * s.f32 + fc_w * s.f32,
            features * s.f32 + fc_w * s.f32,
        );
        b.push(
            "global average pool backward".into(),
            Category::Other,
            last,
            features * s.f32,
            last * s.act,
        );
    }
}

/// Per-parameter-element arithmetic of a LARS/momentum update (norms, trust ratio, momentum, step).
const OPTIMIZER_FLOPS_PER_PARAM: u64 = 8;
/// Per-element arithmetic of BN statistics (sum and sum of squares), BN apply and the
/// BN backward elementwise step.
const BN_STATS_FLOPS: u64 = 3;
const BN_APPLY_FLOPS: u64 = 2;
const BN_DX_FLOPS: u64 = 6;

/// The kernels the GPU backend launches today for one training step.
pub fn today(net: &NetworkShape, batch: usize, precision: Precision) -> Vec<Kernel> {
    let s = Sizes::new(precision);
    let n = batch as u64;
    let mut b = Builder {
        kernels: Vec::new(),
    };
    // A 16-bit step converts each conv's f32 master weights to its operand format on
    // every conv call that takes them (forward, data gradient).
    let weight_bytes = s.act;
    let weight_cast = |b: &mut Builder, conv: &ConvShape| {
        if precision.is_reduced() {
            b.push(
                format!("{} weight to 16-bit", conv.name),
                Category::Other,
                0,
                conv.weights() * s.f32,
                conv.weights() * s.act,
            );
        }
    };
    let bn_forward = |b: &mut Builder, conv: &ConvShape, relu: bool| {
        let e = conv.output_elems() * n;
        let c = conv.out_c as u64;
        b.push(
            format!("{} BN partial sums", conv.name),
            Category::BnPartialSums,
            BN_STATS_FLOPS * e,
            e * s.act,
            0,
        );
        b.push(
            format!("{} BN finalize", conv.name),
            Category::Other,
            10 * c,
            4 * c * s.f32,
            4 * c * s.f32,
        );
        let relu_flops = if relu { e } else { 0 };
        b.push(
            format!("{} BN affine{}", conv.name, if relu { "+ReLU" } else { "" }),
            Category::AffineRelu,
            BN_APPLY_FLOPS * e + relu_flops,
            e * s.act,
            e * s.act,
        );
    };
    // Backward of BN (through the ReLU whose output it reads when `relu`).
    let bn_backward = |b: &mut Builder, conv: &ConvShape, relu: bool| {
        let e = conv.output_elems() * n;
        let c = conv.out_c as u64;
        let inputs = if relu { 3 } else { 2 };
        b.push(
            format!("{} BN backward partial sums", conv.name),
            Category::BnPartialSums,
            BN_STATS_FLOPS * e,
            inputs * e * s.act,
            0,
        );
        b.push(
            format!("{} BN backward finalize", conv.name),
            Category::Other,
            10 * c,
            5 * c * s.f32,
            5 * c * s.f32,
        );
        b.push(
            format!("{} BN dx", conv.name),
            Category::BnDx,
            BN_DX_FLOPS * e,
            inputs * e * s.act,
            e * s.act,
        );
    };

    // Forward.
    weight_cast(&mut b, &net.stem);
    push_conv(&mut b, &net.stem, n, &s, weight_bytes, 0);
    bn_forward(&mut b, &net.stem, true);
    if let Some((side_in, side_out)) = net.stem_pool {
        let c = net.stem.out_c as u64;
        let (x, y) = (
            (side_in * side_in) as u64 * c * n,
            (side_out * side_out) as u64 * c * n,
        );
        b.push(
            "max pool forward".into(),
            Category::Pool,
            9 * y,
            x * s.act,
            y * s.act,
        );
    }
    for block in &net.blocks {
        let last = block.units.len() - 1;
        for (i, unit) in block.units.iter().enumerate() {
            weight_cast(&mut b, unit);
            push_conv(&mut b, unit, n, &s, weight_bytes, 0);
            bn_forward(&mut b, unit, i != last);
        }
        if let Some(ds) = &block.downsample {
            weight_cast(&mut b, ds);
            push_conv(&mut b, ds, n, &s, weight_bytes, 0);
            bn_forward(&mut b, ds, false);
        }
        let e = block.output_elems() * n;
        b.push(
            format!("{} residual add", block.name),
            Category::ResidualAdd,
            e,
            2 * e * s.act,
            e * s.act,
        );
        b.push(
            format!("{} ReLU", block.name),
            Category::Relu,
            e,
            e * s.act,
            e * s.act,
        );
    }
    push_head(&mut b, net, n, &s, false);

    // Backward.
    push_head(&mut b, net, n, &s, true);
    for block in net.blocks.iter().rev() {
        let e = block.output_elems() * n;
        b.push(
            format!("{} ReLU backward", block.name),
            Category::Relu,
            e,
            2 * e * s.act,
            e * s.act,
        );
        if let Some(ds) = &block.downsample {
            bn_backward(&mut b, ds, false);
            weight_cast(&mut b, ds);
            push_conv(&mut b, ds, n, &s, weight_bytes, 1);
            push_conv(&mut b, ds, n, &s, weight_bytes, 2);
        }
        let last = block.units.len() - 1;
        for (i, unit) in block.units.iter().enumerate().rev() {
            bn_backward(&mut b, unit, i != last);
            weight_cast(&mut b, unit);
            push_conv(&mut b, unit, n, &s, weight_bytes, 1);
            push_conv(&mut b, unit, n, &s, weight_bytes, 2);
        }
        let x = block.input_elems() * n;
        b.push(
            format!("{} shortcut gradient add", block.name),
            Category::ResidualAdd,
            x,
            2 * x * s.act,
            x * s.act,
        );
    }
    if let Some((side_in, side_out)) = net.stem_pool {
        let c = net.stem.out_c as u64;
        let (x, y) = (
            (side_in * side_in) as u64 * c * n,
            (side_out * side_out) as u64 * c * n,
        );
        b.push(
            "max pool argmax".into(),
            Category::Pool,
            9 * y,
            x * s.act,
            y * 4,
        );
        b.push(
            "max pool backward".into(),
            Category::Pool,
            x,
            y * 4 + y * s.act,
            x * s.act,
        );
    }
    bn_backward(&mut b, &net.stem, true);
    push_conv(&mut b, &net.stem, n, &s, weight_bytes, 2);

    // Optimizer: per parameter tensor, ‖g‖² (and ‖w‖² for LARS weights), then the update.
    for conv in net.convs() {
        let w = conv.weights();
        b.push(
            format!("{} norms", conv.name),
            Category::Optimizer,
            4 * w,
            2 * w * s.f32,
            0,
        );
        b.push(
            format!("{} update", conv.name),
            Category::Optimizer,
            OPTIMIZER_FLOPS_PER_PARAM * w,
            3 * w * s.f32,
            2 * w * s.f32,
        );
        let c = 2 * conv.out_c as u64;
        b.push(
            format!("{} BN parameters update", conv.name),
            Category::Optimizer,
            OPTIMIZER_FLOPS_PER_PARAM * c,
            4 * c * s.f32,
            2 * c * s.f32,
        );
    }
    let fc = (net.features * net.classes + net.classes) as u64;
    b.push(
        "fc norms".into(),
        Category::Optimizer,
        4 * fc,
        2 * fc * s.f32,
        0,
    );
    b.push(
        "fc update".into(),
        Category::Optimizer,
        OPTIMIZER_FLOPS_PER_PARAM * fc,
        3 * fc * s.f32,
        2 * fc * s.f32,
    );
    b.kernels
}

/// The fewest bytes a fused implementation of the same step must move (see the module
/// documentation for what is fused). FLOPs are the same as [`today`]'s up to the
/// elementwise work fused into the convs.
pub fn floor(net: &NetworkShape, batch: usize, precision: Precision) -> Vec<Kernel> {
    let s = Sizes::new(precision);
    let n = batch as u64;
    let mut b = Builder {
        kernels: Vec::new(),
    };
    // The optimizer writes the 16-bit copy the convs read.
    let weight_bytes = s.act;

    // Forward: each conv reads its input (BN + ReLU of the unit below applied on load)
    // and writes its raw output once, with the BN statistics in its epilogue.
    push_conv(&mut b, &net.stem, n, &s, weight_bytes, 0);
    let stem_out = net.stem.output_elems() * n;
    if let Some((_, side_out)) = net.stem_pool {
        let y = (side_out * side_out) as u64 * net.stem.out_c as u64 * n;
        b.push(
            "stem BN+ReLU+max pool".into(),
            Category::Pool,
            12 * stem_out,
            stem_out * s.act,
            y * s.act,
        );
    }
    for block in &net.blocks {
        for unit in &block.units {
            push_conv(&mut b, unit, n, &s, weight_bytes, 0);
        }
        if let Some(ds) = &block.downsample {
            push_conv(&mut b, ds, n, &s, weight_bytes, 0);
        }
        let e = block.output_elems() * n;
        // Last BN, shortcut (its BN on load when projected), add, ReLU: one pass.
        b.push(
            format!("{} BN+add+ReLU", block.name),
            Category::AffineRelu,
            6 * e,
            2 * e * s.act,
            e * s.act,
        );
    }
    push_head(&mut b, net, n, &s, false);

    // Backward.
    push_head(&mut b, net, n, &s, true);
    for block in net.blocks.iter().rev() {
        let e = block.output_elems() * n;
        let projected = block.downsample.is_some();
        // Statistics of the last BN (and the shortcut's): read the gradient, the block
        // output (ReLU mask) and the conv outputs.
        let stats_reads = if projected { 4 } else { 3 };
        b.push(
            format!("{} ReLU+BN backward statistics", block.name),
            Category::BnPartialSums,
            BN_STATS_FLOPS * e,
            stats_reads * e * s.act,
            0,
        );
        // Apply: the same reads, writing the last conv's output gradient and either the
        // projection's output gradient or, for an identity shortcut, the masked gradient
        // the shortcut carries.
        b.push(
            format!("{} ReLU+BN backward", block.name),
            Category::BnDx,
            BN_DX_FLOPS * e,
            stats_reads * e * s.act,
            2 * e * s.act,
        );
        if let Some(ds) = &block.downsample {
            push_conv(&mut b, ds, n, &s, weight_bytes, 1);
            push_conv(&mut b, ds, n, &s, weight_bytes, 2);
        }
        for (i, unit) in block.units.iter().enumerate().rev() {
            push_conv(&mut b, unit, n, &s, weight_bytes, 1);
            push_conv(&mut b, unit, n, &s, weight_bytes, 2);
            if i > 0 {
                // The data gradient's epilogue gathers the statistics of the BN below
                // (reading that BN's input); the apply is a second pass.
                let below = &block.units[i - 1];
                let m = below.output_elems() * n;
                b.push(
                    format!("{} BN backward statistics (conv epilogue)", below.name),
                    Category::BnPartialSums,
                    BN_STATS_FLOPS * m,
                    m * s.act,
                    0,
                );
                b.push(
                    format!("{} ReLU+BN backward", below.name),
                    Category::BnDx,
                    BN_DX_FLOPS * m,
                    2 * m * s.act,
                    m * s.act,
                );
            } else {
                // The first unit's data gradient adds the shortcut's gradient in its epilogue.
                let x = block.input_elems() * n;
                b.push(
                    format!("{} shortcut gradient (conv epilogue)", block.name),
                    Category::ResidualAdd,
                    x,
                    x * s.act,
                    0,
                );
            }
        }
    }
    if let Some((side_in, side_out)) = net.stem_pool {
        // Max pool backward, ReLU and BN backward of the stem: statistics, then apply,
        // each re-deriving the pool's choice from the stem conv's output.
        let x = (side_in * side_in) as u64 * net.stem.out_c as u64 * n;
        let y = (side_out * side_out) as u64 * net.stem.out_c as u64 * n;
        b.push(
            "stem pool+ReLU+BN backward statistics".into(),
            Category::Pool,
            12 * x,
            (x + y) * s.act,
            0,
        );
        b.push(
            "stem pool+ReLU+BN backward".into(),
            Category::Pool,
            12 * x,
            (x + y) * s.act,
            x * s.act,
        );
    }
    push_conv(&mut b, &net.stem, n, &s, weight_bytes, 2);

    // Multi-tensor: one pass for every norm (LARS needs ‖w‖ and ‖g‖ before any update),
    // then one update pass reading w, g, momentum and writing w, momentum, 16-bit copy.
    let params = net.parameter_count();
    let copy = if precision.is_reduced() { s.act } else { 0 };
    b.push(
        "norms (multi-tensor)".into(),
        Category::Optimizer,
        4 * params,
        2 * params * s.f32,
        0,
    );
    b.push(
        "update (multi-tensor)".into(),
        Category::Optimizer,
        OPTIMIZER_FLOPS_PER_PARAM * params,
        3 * params * s.f32,
        params * (2 * s.f32 + copy),
    );
    b.kernels
}
