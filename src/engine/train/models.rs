//! The networks a training run can choose by name.

use crate::engine::backend::Backend;
use crate::engine::model::resnet::{ResNet, ResNetConfig, Stem};
use crate::engine::Result;

/// A network by name: `resnet20`, `resnet18` (narrow: widths 16…128) or `resnet50`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelChoice {
    /// CIFAR ResNet-20: three stages of three basic blocks at widths 16, 32 and 64.
    ResNet20,
    /// ResNet-18's layout at a quarter of its widths ([`NARROW_RESNET18_WIDTH`]), with the
    /// stem that suits the image size.
    ResNet18,
    /// ResNet-50 v1.5, the network of the MLPerf benchmark.
    ResNet50,
}

/// Base width of the narrow ResNet-18: a quarter of the standard 64.
pub const NARROW_RESNET18_WIDTH: usize = 16;

impl ModelChoice {
    /// The choice called `name` (`resnet20`, `resnet18` or `resnet50`), or `None` for any
    /// other name.
    pub fn parse(name: &str) -> Option<ModelChoice> {
        match name {
            "resnet20" => Some(ModelChoice::ResNet20),
            "resnet18" => Some(ModelChoice::ResNet18),
            "resnet50" => Some(ModelChoice::ResNet50),
            _ => None,
        }
    }

    /// The choice's name, as [`parse`](Self::parse) takes it.
    pub fn name(self) -> &'static str {
        match self {
            ModelChoice::ResNet20 => "resnet20",
            ModelChoice::ResNet18 => "resnet18",
            ModelChoice::ResNet50 => "resnet50",
        }
    }

    /// The network's layout for `classes` classes; `image_size` (pixels per side) picks
    /// ResNet-18's stem and is ignored by the others.
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
        model.init_from_seed(backend, seed)?;
        Ok(model)
    }
}
