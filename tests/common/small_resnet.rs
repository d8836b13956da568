//! A ResNet small enough to train in a test, its replicas and a synthetic batch, for the
//! data-parallel tests.

use tinyperf::engine::data::Batch;
use tinyperf::engine::init::standard_normal;
use tinyperf::engine::layers::SoftmaxCrossEntropy;
use tinyperf::engine::model::resnet::{BlockKind, ResNet, ResNetConfig, Stem};
use tinyperf::engine::optim::LarsConfig;
use tinyperf::engine::parallel::Replica;
use tinyperf::engine::train::DeviceOptimizer;
use tinyperf::engine::Backend;

pub const IMAGE: usize = 8;
pub const CLASSES: usize = 5;

/// Two stages with a projection shortcut, so blocks of both kinds report gradients.
pub fn config() -> ResNetConfig {
    ResNetConfig {
        block: BlockKind::Basic,
        stage_blocks: vec![1, 1],
        base_width: 4,
        stem: Stem::Small,
        stem_width: 4,
        classes: CLASSES,
    }
}

/// The model on `b`, initialised from `seed`.
pub fn model<B: Backend>(b: &B, seed: u64) -> ResNet<B> {
    let mut m = ResNet::new(b, &config()).unwrap();
    m.init_from_seed(b, seed).unwrap();
    m
}

/// A replica on `backend` with the model from `seed` and a fresh LARS optimizer.
pub fn replica<B: Backend>(backend: B, seed: u64) -> Replica<B, ResNet<B>> {
    let model = model(&backend, seed);
    Replica {
        backend,
        model,
        optimizer: DeviceOptimizer::new(LarsConfig::default()),
    }
}

pub fn xent() -> SoftmaxCrossEntropy {
    SoftmaxCrossEntropy {
        label_smoothing: 0.1,
    }
}

/// A cancel check that never cancels.
pub fn never() -> bool {
    false
}

/// `n` images of standard-normal noise from `seed`, with labels cycling over the classes.
pub fn batch(n: usize, seed: u64) -> Batch {
    Batch {
        epoch: 0,
        index: 0,
        image_size: IMAGE,
        images: standard_normal(seed, 3, n * IMAGE * IMAGE * 3),
        labels: (0..n as u32)
            .map(|i| (i * 3 + 1) % CLASSES as u32)
            .collect(),
        valid: vec![true; n],
        sample_ids: (0..n).collect(),
        replaced: 0,
    }
}

/// The contents of `buf`, copied back from the device.
pub fn host<B: Backend>(b: &B, buf: &B::Buffer) -> Vec<f32> {
    let mut out = vec![0.0; b.buffer_len(buf)];
    b.download(buf, &mut out).unwrap();
    out
}

/// The bit patterns of each tensor's values: bitwise equality, where `==` would let
/// -0.0 equal 0.0 and no NaN equal itself.
pub fn bits(v: &[Vec<f32>]) -> Vec<Vec<u32>> {
    v.iter()
        .map(|x| x.iter().map(|f| f.to_bits()).collect())
        .collect()
}
