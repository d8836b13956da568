//! The networks a training run can choose by name.

use crate::engine::backend::Backend;
use crate::engine::layers::ParamKind;
use crate::engine::model::resnet::{ResNet, ResNetConfig, Stem};
use crate::engine::optim::ParamKind as InitKind;
use crate::engine::{init, Result};

fn optim_kind(kind: ParamKind) -> InitKind {
    match kind {
        ParamKind::ConvWeight => InitKind::ConvWeight,
        ParamKind::LinearWeight => InitKind::FcWeight,
        ParamKind::LinearBias => InitKind::FcBias,
        ParamKind::BatchNormGamma => InitKind::BnGamma,
        ParamKind::BatchNormBeta => InitKind::BnBeta,
    }
}

/// A network by name: `resnet20`, `resnet18` (narrow: widths 16…128) or `resnet50`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelChoice {
    ResNet20,
    ResNet18,
    ResNet50,
}

/// Base width of the narrow ResNet-18: a quarter of the standard 64.
pub const NARROW_RESNET18_WIDTH: usize = 16;

impl ModelChoice {
    pub fn parse(name: &str) -> Option<ModelChoice> {
        match name {
            "resnet20" => Some(ModelChoice::ResNet20),
            "resnet18" => Some(ModelChoice::ResNet18),
            "resnet50" => Some(ModelChoice::ResNet50),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ModelChoice::ResNet20 => "resnet20",
            ModelChoice::ResNet18 => "resnet18",
            ModelChoice::ResNet50 => "resnet50",
        }
    }

    pub fn config(self, classes: usize, image_size: usize) -> ResNetConfig {
        match self {
            ModelChoice::ResNet20 => ResNetConfig::resnet20(classes),
            ModelChoice::ResNet18 => ResNetConfig::resnet18(
                NARROW_RESNET18_WIDTH,
                classes,
                Stem::for_image_size(image_size),
            ),
            ModelChoice::ResNet50 => ResNetConfig::resnet50(classes),
        }
    }

    /// The network with the reference initialisation drawn from `seed`.
    pub fn build<B: Backend>(
        self,
        backend: &B,
        classes: usize,
        image_size: usize,
        seed: u64,
    ) -> Result<ResNet<B>> {
        let mut model = ResNet::new(backend, &self.config(classes, image_size))?;
        // Each parameter draws from the stream of its index in PyTorch's order; a
        // kind/shape mismatch yields no values, which init_with reports.
        model.init_with(backend, |index, _, kind, shape| {
            init::init_param(optim_kind(kind), shape, seed, index as u64).unwrap_or_default()
        })?;
        Ok(model)
    }
}
