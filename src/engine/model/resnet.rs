//! Residual networks over the engine's layers: ResNet-50 v1.5 as the MLPerf reference
//! (torchvision's layout and state-dict names), and the small ResNets of the smoke suite
//! (a CIFAR-style ResNet-20 and a narrow ResNet-18).
//!
//! Memory: the model keeps only the activations its backward needs (each conv's output
//! for its batch norm, each ReLU's output, which is also the next conv's input, and the
//! block boundaries), ReLU runs in place, and the backward frees each activation as soon
//! as it has been consumed.

mod block;
pub mod throughput;

pub use block::{Block, ConvBn};

use super::{GradientsReady, Model, NamedParam};
use crate::engine::backend::Backend;
use crate::engine::init;
use crate::engine::layers::{
    BatchNorm2d, Conv2d, GlobalAvgPool, Linear, MaxPool2d, ParamKind, ParamMut,
};
use crate::engine::tensor::Tensor;
use crate::engine::{EngineError, Result};

/// The residual block a network is built from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockKind {
    /// Two 3×3 convs (ResNet-18/20).
    Basic,
    /// 1×1, 3×3 (strided), 1×1 with 4× expansion (ResNet-50 v1.5).
    Bottleneck,
}

impl BlockKind {
    fn expansion(self) -> usize {
        match self {
            BlockKind::Basic => 1,
            BlockKind::Bottleneck => 4,
        }
    }
}

/// How the network meets the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stem {
    /// 7×7 stride-2 conv (padding 3) → BN → ReLU → 3×3 stride-2 max pool (padding 1).
    ImageNet,
    /// 3×3 stride-1 conv (padding 1) → BN → ReLU, no pool: for small images.
    Small,
}

impl Stem {
    /// The small stem for images of at most 64 pixels, where the ImageNet stem's 4×
    /// downsampling would leave too little resolution for the stages.
    pub fn for_image_size(pixels: usize) -> Stem {
        if pixels <= 64 {
            Stem::Small
        } else {
            Stem::ImageNet
        }
    }
}

/// The shape of a residual network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResNetConfig {
    /// Basic or bottleneck blocks.
    pub block: BlockKind,
    /// Blocks per stage; stage `s` (from 0) has width `base_width << s` and, except the
    /// first, a stride of 2 on its first block.
    pub stage_blocks: Vec<usize>,
    /// Width of the first stage; for bottlenecks the inner width, whose output is 4× it.
    pub base_width: usize,
    /// The layers between the image and the first stage.
    pub stem: Stem,
    /// Output channels of the stem conv.
    pub stem_width: usize,
    /// Classes the classifier predicts: the logits per sample.
    pub classes: usize,
}

impl ResNetConfig {
    /// ResNet-50 v1.5: bottlenecks [3, 4, 6, 3] of widths 64…512 (×4), ImageNet stem.
    pub fn resnet50(classes: usize) -> Self {
        ResNetConfig {
            block: BlockKind::Bottleneck,
            stage_blocks: vec![3, 4, 6, 3],
            base_width: 64,
            stem: Stem::ImageNet,
            stem_width: 64,
            classes,
        }
    }

    /// CIFAR ResNet-20: 3×3 stem of 16, three stages of three basic blocks at 16/32/64,
    /// projection (1×1 conv + BN) shortcuts where the shape changes.
    pub fn resnet20(classes: usize) -> Self {
        ResNetConfig {
            block: BlockKind::Basic,
            stage_blocks: vec![3, 3, 3],
            base_width: 16,
            stem: Stem::Small,
            stem_width: 16,
            classes,
        }
    }

    /// ResNet-18 layout (basic blocks [2, 2, 2, 2]) at widths `w, 2w, 4w, 8w`.
    pub fn resnet18(base_width: usize, classes: usize, stem: Stem) -> Self {
        ResNetConfig {
            block: BlockKind::Basic,
            stage_blocks: vec![2, 2, 2, 2],
            base_width,
            stem,
            stem_width: base_width,
            classes,
        }
    }

    fn validate(&self) -> Result<()> {
        let bad = |reason: String| {
            Err(EngineError::InvalidParameter {
                op: "ResNet::new",
                reason,
            })
        };
        if self.stage_blocks.is_empty() || self.stage_blocks.contains(&0) {
            return bad(format!(
                "every stage needs a block, got {:?}",
                self.stage_blocks
            ));
        }
        if self.base_width == 0 || self.stem_width == 0 || self.classes == 0 {
            return bad(format!(
                "widths and classes must be positive (base {}, stem {}, classes {})",
                self.base_width, self.stem_width, self.classes
            ));
        }
        if self.stage_blocks.len() > 8 {
            return bad(format!("{} stages is too many", self.stage_blocks.len()));
        }
        Ok(())
    }

    /// Channels the last stage produces (the classifier's input features).
    pub fn features(&self) -> usize {
        (self.base_width << (self.stage_blocks.len() - 1)) * self.block.expansion()
    }
}

/// One parameter as PyTorch sees it: state-dict name, kind and shape (OIHW for conv
/// weights, `[out, in]` for linear weights, `[channels]` for the rest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamSpec {
    /// The state-dict name, e.g. `layer1.0.bn1.weight`.
    pub name: String,
    /// What the parameter is, which decides how the optimizer treats it.
    pub kind: ParamKind,
    /// Dimensions in PyTorch's order.
    pub shape: Vec<usize>,
}

/// A module holding parameters, under its state-dict prefix.
enum Module<'a, B: Backend> {
    Conv(&'a Conv2d<B>),
    Bn(&'a BatchNorm2d<B>),
    Fc(&'a Linear<B>),
}

enum ModuleMut<'a, B: Backend> {
    Conv(&'a mut Conv2d<B>),
    Bn(&'a mut BatchNorm2d<B>),
    Fc(&'a mut Linear<B>),
}

struct NamedBlock<B: Backend> {
    /// `layer{stage}.{index}`.
    name: String,
    block: Block<B>,
}

/// What the training-mode forward keeps for the backward.
struct Saved<B: Backend> {
    images: Tensor<B>,
    stem_conv_out: Tensor<B>,
    /// The stem ReLU's output when a max pool follows it (the pool's input).
    stem_relu_out: Option<Tensor<B>>,
    /// `block_io[0]` is the first block's input, `block_io[i + 1]` block i's output.
    block_io: Vec<Tensor<B>>,
    pooled: Tensor<B>,
}

/// A residual network of a [`ResNetConfig`]'s shape: stem, blocks, global average pool and
/// classifier, holding what its last training-mode forward kept for the backward.
pub struct ResNet<B: Backend> {
    config: ResNetConfig,
    stem: ConvBn<B>,
    stem_pool: Option<MaxPool2d>,
    blocks: Vec<NamedBlock<B>>,
    fc: Linear<B>,
    saved: Option<Saved<B>>,
}

/// The optimizer's name for a layer's parameter kind.
fn missing(op: &'static str) -> EngineError {
    EngineError::MissingForwardState { op }
}

impl<B: Backend> ResNet<B> {
    /// A network of `config`'s shape with conv and FC weights zero and BN γ = 1, β = 0;
    /// set the weights with [`ResNet::init_from_seed`] or [`ResNet::init_with`].
    pub fn new(backend: &B, config: &ResNetConfig) -> Result<Self> {
        config.validate()?;
        let (stem_kernel, stem_stride, stem_pool) = match config.stem {
            Stem::ImageNet => (7, 2, Some(MaxPool2d::RESNET_STEM)),
            Stem::Small => (3, 1, None),
        };
        let mut stem = ConvBn::new(backend, 3, config.stem_width, stem_kernel, stem_stride)?;
        stem.conv.needs_input_grad = false;
        let expansion = config.block.expansion();
        let mut in_c = config.stem_width;
        let mut blocks = Vec::new();
        for (s, &count) in config.stage_blocks.iter().enumerate() {
            let width = config.base_width << s;
            for i in 0..count {
                let stride = if s > 0 && i == 0 { 2 } else { 1 };
                let block = match config.block {
                    BlockKind::Basic => Block::basic(backend, in_c, width, stride)?,
                    BlockKind::Bottleneck => {
                        Block::bottleneck(backend, in_c, width, expansion, stride)?
                    }
                };
                blocks.push(NamedBlock {
                    name: format!("layer{}.{i}", s + 1),
                    block,
                });
                in_c = width * expansion;
            }
        }
        Ok(ResNet {
            config: config.clone(),
            stem,
            stem_pool,
            blocks,
            fc: Linear::new(backend, in_c, config.classes)?,
            saved: None,
        })
    }

    /// The shape the network was built with.
    pub fn config(&self) -> &ResNetConfig {
        &self.config
    }

    /// Modules in PyTorch's `named_parameters()` order, under their state-dict prefixes.
    fn modules(&self) -> Vec<(String, Module<'_, B>)> {
        let mut out = vec![
            ("conv1".to_string(), Module::Conv(&self.stem.conv)),
            ("bn1".to_string(), Module::Bn(&self.stem.bn)),
        ];
        for nb in &self.blocks {
            for (u, unit) in nb.block.units.iter().enumerate() {
                out.push((
                    format!("{}.conv{}", nb.name, u + 1),
                    Module::Conv(&unit.conv),
                ));
                out.push((format!("{}.bn{}", nb.name, u + 1), Module::Bn(&unit.bn)));
            }
            if let Some(ds) = &nb.block.downsample {
                out.push((format!("{}.downsample.0", nb.name), Module::Conv(&ds.conv)));
                out.push((format!("{}.downsample.1", nb.name), Module::Bn(&ds.bn)));
            }
        }
        out.push(("fc".to_string(), Module::Fc(&self.fc)));
        out
    }

    fn modules_mut(&mut self) -> Vec<(String, ModuleMut<'_, B>)> {
        let mut out = vec![
            ("conv1".to_string(), ModuleMut::Conv(&mut self.stem.conv)),
            ("bn1".to_string(), ModuleMut::Bn(&mut self.stem.bn)),
        ];
        for nb in &mut self.blocks {
            let name = &nb.name;
            for (u, unit) in nb.block.units.iter_mut().enumerate() {
                out.push((
                    format!("{name}.conv{}", u + 1),
                    ModuleMut::Conv(&mut unit.conv),
                ));
                out.push((format!("{name}.bn{}", u + 1), ModuleMut::Bn(&mut unit.bn)));
            }
            if let Some(ds) = &mut nb.block.downsample {
                out.push((
                    format!("{name}.downsample.0"),
                    ModuleMut::Conv(&mut ds.conv),
                ));
                out.push((format!("{name}.downsample.1"), ModuleMut::Bn(&mut ds.bn)));
            }
        }
        out.push(("fc".to_string(), ModuleMut::Fc(&mut self.fc)));
        out
    }

    /// Every learned parameter's state-dict name, kind and PyTorch shape, in
    /// `named_parameters()` order (the order of [`Model::parameters`]).
    pub fn param_specs(&self) -> Vec<ParamSpec> {
        let spec = |name: String, kind, shape: Vec<usize>| ParamSpec { name, kind, shape };
        let mut out = Vec::new();
        for (prefix, module) in self.modules() {
            match module {
                Module::Conv(conv) => {
                    let s = conv.weight_shape();
                    out.push(spec(
                        format!("{prefix}.weight"),
                        ParamKind::ConvWeight,
                        vec![s.out_c, s.in_c, s.kernel_h, s.kernel_w],
                    ));
                }
                Module::Bn(bn) => {
                    let c = bn.channels;
                    out.push(spec(
                        format!("{prefix}.weight"),
                        ParamKind::BatchNormGamma,
                        vec![c],
                    ));
                    out.push(spec(
                        format!("{prefix}.bias"),
                        ParamKind::BatchNormBeta,
                        vec![c],
                    ));
                }
                Module::Fc(fc) => {
                    out.push(spec(
                        format!("{prefix}.weight"),
                        ParamKind::LinearWeight,
                        vec![fc.out_features, fc.in_features],
                    ));
                    out.push(spec(
                        format!("{prefix}.bias"),
                        ParamKind::LinearBias,
                        vec![fc.out_features],
                    ));
                }
            }
        }
        out
    }

    /// Learned parameters in all (the figure PyTorch's `sum(p.numel())` gives).
    pub fn parameter_count(&self) -> usize {
        self.param_specs()
            .iter()
            .map(|s| s.shape.iter().product::<usize>())
            .sum()
    }

    /// The batch norms with their state-dict prefixes (`bn1`, `layer1.0.downsample.1`),
    /// for reading running statistics.
    pub fn batch_norms(&self) -> Vec<(String, &BatchNorm2d<B>)> {
        self.modules()
            .into_iter()
            .filter_map(|(name, m)| match m {
                Module::Bn(bn) => Some((name, bn)),
                _ => None,
            })
            .collect()
    }

    /// Sets every parameter from `values(index, name, kind, shape)`, which returns the
    /// values in PyTorch's order for that shape (`index` is the position in
    /// [`ResNet::param_specs`], the stream the reference initialiser draws from), and
    /// resets every batch norm's running statistics to mean 0, variance 1.
    pub fn init_with<F>(&mut self, backend: &B, mut values: F) -> Result<()>
    where
        F: FnMut(usize, &str, ParamKind, &[usize]) -> Vec<f32>,
    {
        let specs = self.param_specs();
        let mut specs = specs.iter().enumerate();
        let mut next = |expected: ParamKind| -> Result<Vec<f32>> {
            let (index, spec) = specs.next().ok_or_else(|| EngineError::InvalidParameter {
                op: "ResNet::init_with",
                reason: "more modules than parameter specs".into(),
            })?;
            debug_assert_eq!(spec.kind, expected);
            let v = values(index, &spec.name, spec.kind, &spec.shape);
            let len: usize = spec.shape.iter().product();
            EngineError::check_length("ResNet::init_with", "initial values", len, v.len())?;
            Ok(v)
        };
        for (_, module) in self.modules_mut() {
            match module {
                ModuleMut::Conv(conv) => {
                    let v = next(ParamKind::ConvWeight)?;
                    conv.set_weight_oihw(backend, &v)?;
                }
                ModuleMut::Bn(bn) => {
                    bn.state.gamma = backend.upload(&next(ParamKind::BatchNormGamma)?)?;
                    bn.state.beta = backend.upload(&next(ParamKind::BatchNormBeta)?)?;
                    backend.fill(&mut bn.state.running_mean, 0.0)?;
                    backend.fill(&mut bn.state.running_var, 1.0)?;
                }
                ModuleMut::Fc(fc) => {
                    let w = next(ParamKind::LinearWeight)?;
                    fc.weight = Tensor::from_host(backend, &[fc.out_features, fc.in_features], &w)?;
                    let b = next(ParamKind::LinearBias)?;
                    fc.bias = Tensor::from_host(backend, &[fc.out_features], &b)?;
                }
            }
        }
        Ok(())
    }

    /// The reference initialisation (truncated He normal conv weights, N(0, 0.01²) FC
    /// weights, zero FC bias, BN γ = 1 and β = 0) from `seed`, each parameter drawing
    /// from the stream of its index in PyTorch's `named_parameters()` order: the same
    /// values `scripts/torch_reference.py` gives PyTorch.
    pub fn init_from_seed(&mut self, backend: &B, seed: u64) -> Result<()> {
        self.init_with(backend, |index, _, kind, shape| {
            // A kind/shape mismatch yields no values, which init_with reports.
            init::init_param(kind, shape, seed, index as u64).unwrap_or_default()
        })
    }

    /// Weight gradients of a conv in PyTorch's OIHW order, by state-dict name
    /// (`layer1.0.conv2.weight`); `None` for names that are not conv weights.
    pub fn conv_weight_grad_oihw(&self, backend: &B, name: &str) -> Result<Option<Vec<f32>>> {
        for (prefix, module) in self.modules() {
            if let Module::Conv(conv) = module {
                if name.strip_suffix(".weight") == Some(prefix.as_str()) {
                    return conv.weight_grad_oihw(backend).map(Some);
                }
            }
        }
        Ok(None)
    }
}

impl<B: Backend> ResNet<B> {
    /// Parameters per module: a conv has one, a BN and the classifier two.
    fn block_param_count(block: &Block<B>) -> usize {
        3 * (block.units.len() + usize::from(block.downsample.is_some()))
    }

    /// The same pass as [`Model::backward`], telling `ready` about the classifier, each
    /// block from the last, and the stem as their gradients become final.
    fn backward_in_order(
        &mut self,
        backend: &B,
        dlogits: &Tensor<B>,
        mut ready: Option<&mut GradientsReady<'_, B>>,
    ) -> Result<()> {
        let saved = self.saved.take().ok_or(missing("resnet backward"))?;
        let Saved {
            images,
            stem_conv_out,
            stem_relu_out,
            mut block_io,
            pooled,
        } = saved;
        let dpooled = self
            .fc
            .backward(backend, &pooled, dlogits, true)?
            .ok_or(missing("resnet backward (classifier input gradient)"))?;
        drop(pooled);
        let stem_params = 3;
        let mut end = stem_params
            + self
                .blocks
                .iter()
                .map(|nb| Self::block_param_count(&nb.block))
                .sum::<usize>();
        if let Some(ready) = ready.as_mut() {
            let grads = self.fc.parameters().into_iter().map(|p| p.grad).collect();
            ready(end..end + 2, grads)?;
        }
        let mut out = block_io.pop().ok_or(missing("resnet backward (output)"))?;
        let mut grad = GlobalAvgPool::backward(backend, out.nhwc("resnet backward")?, &dpooled)?;
        drop(dpooled);
        for nb in self.blocks.iter_mut().rev() {
            let input = block_io
                .last()
                .ok_or(missing("resnet backward (block input)"))?;
            grad = nb.block.backward(backend, input, &out, grad)?;
            out = block_io
                .pop()
                .ok_or(missing("resnet backward (block input)"))?;
            let count = Self::block_param_count(&nb.block);
            if let Some(ready) = ready.as_mut() {
                ready(end - count..end, block_grads(&mut nb.block))?;
            }
            end -= count;
        }
        match (&self.stem_pool, stem_relu_out) {
            (Some(pool), Some(relu_out)) => {
                let g = pool.backward(backend, &relu_out, &grad)?;
                drop((grad, out));
                self.stem
                    .backward_relu(backend, &images, stem_conv_out, &relu_out, g)?;
            }
            (None, None) => {
                self.stem
                    .backward_relu(backend, &images, stem_conv_out, &out, grad)?;
            }
            _ => return Err(missing("resnet backward (stem)")),
        };
        if let Some(ready) = ready.as_mut() {
            let grads = self
                .stem
                .conv
                .parameters()
                .into_iter()
                .chain(self.stem.bn.parameters())
                .map(|p| p.grad)
                .collect();
            ready(0..stem_params, grads)?;
        }
        Ok(())
    }
}

/// A block's gradients in `parameters()` order: each unit's conv and BN, then the
/// projection's.
fn block_grads<B: Backend>(block: &mut Block<B>) -> Vec<&mut B::Buffer> {
    let mut out = Vec::new();
    for unit in block.units.iter_mut().chain(block.downsample.iter_mut()) {
        out.extend(
            unit.conv
                .parameters()
                .into_iter()
                .chain(unit.bn.parameters())
                .map(|p| p.grad),
        );
    }
    out
}

impl<B: Backend> Model<B> for ResNet<B> {
    fn classes(&self) -> usize {
        self.config.classes
    }

    fn forward(&mut self, backend: &B, images: &Tensor<B>, training: bool) -> Result<Tensor<B>> {
        // Last step's activations go first, so two steps never live together.
        self.saved = None;
        let (stem_conv_out, relu) = self.stem.forward_relu(backend, images, training)?;
        let (stem_relu_out, first_input) = match &self.stem_pool {
            Some(pool) => {
                let pooled = pool.forward(backend, &relu)?;
                (Some(relu), pooled)
            }
            None => (None, relu),
        };
        let mut block_io = Vec::with_capacity(self.blocks.len() + 1);
        let mut current = first_input;
        for nb in &mut self.blocks {
            let out = nb.block.forward(backend, &current, training)?;
            let input = std::mem::replace(&mut current, out);
            if training {
                block_io.push(input);
            }
        }
        let pooled = GlobalAvgPool::forward(backend, &current)?;
        let logits = self.fc.forward(backend, &pooled)?;
        if training {
            block_io.push(current);
            self.saved = Some(Saved {
                images: images.duplicate(backend)?,
                stem_conv_out,
                stem_relu_out,
                block_io,
                pooled,
            });
        }
        Ok(logits)
    }

    fn backward(&mut self, backend: &B, dlogits: &Tensor<B>) -> Result<()> {
        self.backward_in_order(backend, dlogits, None)
    }

    fn backward_notifying(
        &mut self,
        backend: &B,
        dlogits: &Tensor<B>,
        ready: &mut GradientsReady<'_, B>,
    ) -> Result<()> {
        self.backward_in_order(backend, dlogits, Some(ready))
    }

    fn parameters(&mut self) -> Vec<NamedParam<'_, B>> {
        let mut out = Vec::new();
        for (prefix, module) in self.modules_mut() {
            let params: Vec<ParamMut<'_, B>> = match module {
                ModuleMut::Conv(conv) => conv.parameters(),
                ModuleMut::Bn(bn) => bn.parameters(),
                ModuleMut::Fc(fc) => fc.parameters(),
            };
            for param in params {
                let leaf = match param.kind {
                    ParamKind::ConvWeight | ParamKind::LinearWeight | ParamKind::BatchNormGamma => {
                        "weight"
                    }
                    ParamKind::LinearBias | ParamKind::BatchNormBeta => "bias",
                };
                out.push(NamedParam {
                    name: format!("{prefix}.{leaf}"),
                    param,
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
