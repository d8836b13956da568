use super::*;
use crate::engine::gradcheck::{assert_grad_close, uniform};
use crate::engine::layers::{conv_weight_to_oihw, ConvWeightShape, SoftmaxCrossEntropy};
use crate::engine::CpuBackend;

/// Deterministic values per parameter: conv and FC weights uniform in ±0.5, γ around 1,
/// β around 0, so batch norm does not sit on a symmetric point.
fn base_values(specs: &[ParamSpec]) -> Vec<Vec<f32>> {
    specs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let len = s.shape.iter().product();
            let seed = 1000 + i as u64;
            match s.kind {
                ParamKind::BatchNormGamma => uniform(len, seed, 0.6, 1.4),
                ParamKind::BatchNormBeta | ParamKind::LinearBias => uniform(len, seed, -0.2, 0.2),
                ParamKind::ConvWeight | ParamKind::LinearWeight => uniform(len, seed, -0.5, 0.5),
            }
        })
        .collect()
}

fn model_with(b: &CpuBackend, config: &ResNetConfig, values: &[Vec<f32>]) -> ResNet<CpuBackend> {
    let mut model = ResNet::new(b, config).unwrap();
    model.init_with(b, |i, _, _, _| values[i].clone()).unwrap();
    model
}

fn loss(
    b: &CpuBackend,
    model: &mut ResNet<CpuBackend>,
    images: &Tensor<CpuBackend>,
    labels: &Tensor<CpuBackend>,
    backward: bool,
) -> f64 {
    let xent = SoftmaxCrossEntropy {
        label_smoothing: 0.1,
    };
    let logits = model.forward(b, images, true).unwrap();
    let out = xent.forward(b, &logits, labels).unwrap();
    if backward {
        let dlogits = xent.backward(b, &logits, labels).unwrap();
        model.backward(b, &dlogits).unwrap();
    }
    out.loss.to_host(b).unwrap()[0] as f64
}

/// Parameter gradients in PyTorch's order (OIHW for conv weights).
fn torch_order_grads(b: &CpuBackend, model: &mut ResNet<CpuBackend>) -> Vec<Vec<f32>> {
    let specs = model.param_specs();
    model
        .parameters()
        .iter()
        .zip(&specs)
        .map(|(p, s)| {
            let mut host = vec![0.0; b.buffer_len(p.param.grad)];
            b.download(p.param.grad, &mut host).unwrap();
            match s.shape[..] {
                [out_c, in_c, kernel_h, kernel_w] => conv_weight_to_oihw(
                    &host,
                    ConvWeightShape {
                        out_c,
                        in_c,
                        kernel_h,
                        kernel_w,
                    },
                )
                .unwrap(),
                _ => host,
            }
        })
        .collect()
}

/// Finite differences on a few elements of the named parameters through the whole
/// model (forward in training mode, cross-entropy, backward).
fn check_model_gradients(config: &ResNetConfig, image: usize, names: &[&str]) {
    let b = &CpuBackend::new();
    let probe = ResNet::new(b, config).unwrap();
    let specs = probe.param_specs();
    let values = base_values(&specs);
    let shape = [2, image, image, 3];
    let images =
        Tensor::from_host(b, &shape, &uniform(shape.iter().product(), 7, -1.0, 1.0)).unwrap();
    let labels = Tensor::from_host(b, &[2], &[1.0, (config.classes - 1) as f32]).unwrap();
    let mut model = model_with(b, config, &values);
    loss(b, &mut model, &images, &labels, true);
    let grads = torch_order_grads(b, &mut model);
    for name in names {
        let index = specs
            .iter()
            .position(|s| s.name == *name)
            .unwrap_or_else(|| panic!("no parameter {name}"));
        let len = values[index].len();
        let picks: Vec<usize> = (0..4).map(|k| (k * 7919 + 3) % len).collect();
        // Small steps: ReLU kinks near the probed point make larger ones second-order
        // inaccurate, and f32 noise stays near 2e-4 at this step.
        let h = 5e-4;
        let numeric: Vec<f64> = picks
            .iter()
            .map(|&e| {
                let at = |delta: f32| {
                    let mut v = values.clone();
                    v[index][e] += delta;
                    loss(b, &mut model_with(b, config, &v), &images, &labels, false)
                };
                (at(h) - at(-h)) / (2.0 * h as f64)
            })
            .collect();
        let analytic: Vec<f32> = picks.iter().map(|&e| grads[index][e]).collect();
        assert_grad_close(name, &analytic, &numeric, 5e-2, 5e-4);
    }
}

#[test]
fn basic_block_resnet_gradients_match_finite_differences() {
    let config = ResNetConfig {
        block: BlockKind::Basic,
        stage_blocks: vec![2, 1],
        base_width: 4,
        stem: Stem::Small,
        stem_width: 3,
        classes: 5,
    };
    check_model_gradients(
        &config,
        6,
        &[
            "conv1.weight",
            "bn1.weight",
            "layer1.0.conv1.weight",
            "layer1.0.downsample.0.weight",
            "layer1.1.conv2.weight",
            "layer1.1.bn1.bias",
            "layer2.0.conv1.weight",
            "layer2.0.downsample.1.weight",
            "fc.weight",
            "fc.bias",
        ],
    );
}

#[test]
fn bottleneck_resnet_with_pooled_stem_gradients_match_finite_differences() {
    let config = ResNetConfig {
        block: BlockKind::Bottleneck,
        stage_blocks: vec![2, 1],
        base_width: 2,
        stem: Stem::ImageNet,
        stem_width: 4,
        classes: 3,
    };
    check_model_gradients(
        &config,
        13,
        &[
            "conv1.weight",
            "bn1.bias",
            "layer1.0.conv2.weight",
            "layer1.0.downsample.0.weight",
            "layer1.1.conv3.weight",
            "layer1.1.bn2.weight",
            "layer2.0.conv2.weight",
            "fc.weight",
        ],
    );
}

#[test]
fn backward_needs_a_training_forward() {
    let b = &CpuBackend::new();
    let mut model = ResNet::new(b, &ResNetConfig::resnet20(4)).unwrap();
    let dlogits = Tensor::zeros(b, &[1, 4]).unwrap();
    assert!(matches!(
        model.backward(b, &dlogits),
        Err(EngineError::MissingForwardState { .. })
    ));
    let images = Tensor::zeros(b, &[1, 8, 8, 3]).unwrap();
    model.forward(b, &images, false).unwrap();
    assert!(matches!(
        model.backward(b, &dlogits),
        Err(EngineError::MissingForwardState { .. })
    ));
    model.forward(b, &images, true).unwrap();
    model.backward(b, &dlogits).unwrap();
    assert!(model.backward(b, &dlogits).is_err(), "state is used once");
}

#[test]
fn bad_configs_and_inputs_are_errors() {
    let b = &CpuBackend::new();
    let mut config = ResNetConfig::resnet20(10);
    config.stage_blocks = vec![3, 0];
    assert!(ResNet::new(b, &config).is_err());
    config = ResNetConfig::resnet20(0);
    assert!(ResNet::new(b, &config).is_err());
    let mut model = ResNet::new(b, &ResNetConfig::resnet20(10)).unwrap();
    let four_channels = Tensor::zeros(b, &[1, 8, 8, 4]).unwrap();
    assert!(model.forward(b, &four_channels, true).is_err());
    let short = |_: usize, _: &str, _: ParamKind, _: &[usize]| vec![0.0; 1];
    assert!(matches!(
        model.init_with(b, short),
        Err(EngineError::BufferLength { .. })
    ));
    assert_eq!(Stem::for_image_size(32), Stem::Small);
    assert_eq!(Stem::for_image_size(224), Stem::ImageNet);
}
