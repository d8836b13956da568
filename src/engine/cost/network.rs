//! The layers of a residual network as shapes, laid out exactly as
//! [`ResNet::new`](crate::engine::model::resnet::ResNet::new) builds them from the same
//! [`ResNetConfig`], so costs can be counted without allocating the model.

use crate::engine::model::resnet::{BlockKind, ResNetConfig, Stem};

/// One convolution at a given batch geometry (square images, padding `kernel / 2`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvShape {
    /// State-dict prefix, as `ResNet::param_specs` names it (`layer1.0.conv2`).
    pub name: String,
    /// Input channels.
    pub in_c: usize,
    /// Output channels.
    pub out_c: usize,
    /// The side of the square kernel, in taps.
    pub kernel: usize,
    /// The step between output positions on the input, in pixels.
    pub stride: usize,
    /// The side of the square input feature map, in pixels.
    pub in_side: usize,
    /// The side of the square output feature map, in pixels.
    pub out_side: usize,
    /// The stem conv computes no gradient for the images.
    pub needs_input_grad: bool,
}

impl ConvShape {
    fn new(
        name: String,
        in_c: usize,
        out_c: usize,
        kernel: usize,
        stride: usize,
        in_side: usize,
    ) -> Self {
        let out_side = (in_side + 2 * (kernel / 2) - kernel) / stride + 1;
        ConvShape {
            name,
            in_c,
            out_c,
            kernel,
            stride,
            in_side,
            out_side,
            needs_input_grad: true,
        }
    }

    /// Weight elements: `out_c · in_c · kernel²` (the conv has no bias).
    pub fn weights(&self) -> u64 {
        (self.out_c * self.in_c * self.kernel * self.kernel) as u64
    }

    /// Input elements per image.
    pub fn input_elems(&self) -> u64 {
        (self.in_side * self.in_side * self.in_c) as u64
    }

    /// Output elements per image.
    pub fn output_elems(&self) -> u64 {
        (self.out_side * self.out_side * self.out_c) as u64
    }

    /// Multiply-accumulates of the forward per image (the data and weight gradients take
    /// as many each).
    pub fn macs(&self) -> u64 {
        self.output_elems() * (self.in_c * self.kernel * self.kernel) as u64
    }

    /// A 1×1 stride-1 conv runs as a plain GEMM on the activations; strided 1×1 and
    /// larger kernels are convolutions.
    pub fn is_pointwise(&self) -> bool {
        self.kernel == 1 && self.stride == 1
    }
}

/// One residual block: its conv → BN units and its shortcut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockShape {
    /// `layer{stage}.{index}`.
    pub name: String,
    /// conv → BN units; every one but the last ends in a ReLU.
    pub units: Vec<ConvShape>,
    /// The projection shortcut (1×1 conv + BN) where the shape changes.
    pub downsample: Option<ConvShape>,
}

impl BlockShape {
    /// Input elements per image of the block's first conv.
    pub fn input_elems(&self) -> u64 {
        self.units[0].input_elems()
    }

    /// Output elements per image of the block's last conv (the block's output).
    pub fn output_elems(&self) -> u64 {
        self.units[self.units.len() - 1].output_elems()
    }
}

/// A whole residual network as shapes at one input size: stem, blocks and classifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkShape {
    /// The side of the square input images, in pixels.
    pub image_side: usize,
    /// The stem conv (`conv1`).
    pub stem: ConvShape,
    /// The stem's 3×3 stride-2 max pool: (side in, side out) when the stem has one.
    pub stem_pool: Option<(usize, usize)>,
    /// The residual blocks in order, `layer1.0` first.
    pub blocks: Vec<BlockShape>,
    /// Channels into the classifier after the global average pool (2048 for ResNet-50).
    pub features: usize,
    /// Classes the classifier scores (1000 for ImageNet).
    pub classes: usize,
}

impl NetworkShape {
    /// The shapes of the network `config` describes on square images of `image_side`
    /// pixels.
    pub fn new(config: &ResNetConfig, image_side: usize) -> Self {
        let (stem_kernel, stem_stride) = match config.stem {
            Stem::ImageNet => (7, 2),
            Stem::Small => (3, 1),
        };
        let mut stem = ConvShape::new(
            "conv1".into(),
            3,
            config.stem_width,
            stem_kernel,
            stem_stride,
            image_side,
        );
        stem.needs_input_grad = false;
        let mut side = stem.out_side;
        let stem_pool = match config.stem {
            Stem::ImageNet => {
                let out = (side + 2 - 3) / 2 + 1;
                let pool = (side, out);
                side = out;
                Some(pool)
            }
            Stem::Small => None,
        };
        let expansion = match config.block {
            BlockKind::Basic => 1,
            BlockKind::Bottleneck => 4,
        };
        let mut in_c = config.stem_width;
        let mut blocks = Vec::new();
        for (s, &count) in config.stage_blocks.iter().enumerate() {
            let width = config.base_width << s;
            for i in 0..count {
                let name = format!("layer{}.{i}", s + 1);
                let stride = if s > 0 && i == 0 { 2 } else { 1 };
                let out_c = width * expansion;
                let conv = |u: usize, ci, co, k, st, side| {
                    ConvShape::new(format!("{name}.conv{u}"), ci, co, k, st, side)
                };
                let units = match config.block {
                    BlockKind::Basic => {
                        let a = conv(1, in_c, width, 3, stride, side);
                        let b = conv(2, width, width, 3, 1, a.out_side);
                        vec![a, b]
                    }
                    BlockKind::Bottleneck => {
                        let a = conv(1, in_c, width, 1, 1, side);
                        let b = conv(2, width, width, 3, stride, a.out_side);
                        let c = conv(3, width, out_c, 1, 1, b.out_side);
                        vec![a, b, c]
                    }
                };
                let downsample = (stride != 1 || in_c != out_c).then(|| {
                    ConvShape::new(format!("{name}.downsample.0"), in_c, out_c, 1, stride, side)
                });
                side = units[units.len() - 1].out_side;
                blocks.push(BlockShape {
                    name,
                    units,
                    downsample,
                });
                in_c = out_c;
            }
        }
        NetworkShape {
            image_side,
            stem,
            stem_pool,
            blocks,
            features: in_c,
            classes: config.classes,
        }
    }

    /// Every conv in `named_parameters()` order.
    pub fn convs(&self) -> Vec<&ConvShape> {
        let mut out = vec![&self.stem];
        for block in &self.blocks {
            out.extend(block.units.iter());
            out.extend(block.downsample.iter());
        }
        out
    }

    /// Learned parameters (conv weights, BN γ and β, FC weight and bias).
    pub fn parameter_count(&self) -> u64 {
        let convs = self.convs();
        let weights: u64 = convs.iter().map(|c| c.weights()).sum();
        let bn: u64 = convs.iter().map(|c| 2 * c.out_c as u64).sum();
        weights + bn + (self.features * self.classes + self.classes) as u64
    }

    /// Forward multiply-accumulates per image: convs and the classifier.
    pub fn forward_macs(&self) -> u64 {
        let convs: u64 = self.convs().iter().map(|c| c.macs()).sum();
        convs + (self.features * self.classes) as u64
    }

    /// Batch-norm layers with their channel counts (one per conv).
    pub fn batch_norm_channels(&self) -> Vec<usize> {
        self.convs().iter().map(|c| c.out_c).collect()
    }
}
