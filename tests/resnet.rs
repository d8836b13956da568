//! The ResNet models: sizes, state-dict names and shapes, eval mode, learning, and the
//! whole forward and backward against PyTorch on the reference fixture
//! (tests/fixtures/torch/<model>_reference.json, written by scripts/torch_reference.py).

use serde_json::Value;
use tinyperf::engine::init::{checksum, nchw_to_nhwc, standard_normal};
use tinyperf::engine::layers::{ParamKind, SoftmaxCrossEntropy};
use tinyperf::engine::model::resnet::{ResNet, ResNetConfig, Stem};
use tinyperf::engine::model::Model;
use tinyperf::engine::{Backend, CpuBackend, Tensor};

type T = Tensor<CpuBackend>;

fn fixture(model: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/torch/{model}_reference.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn f64_of(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn norm(values: &[f32]) -> f64 {
    values
        .iter()
        .map(|&v| f64::from(v) * f64::from(v))
        .sum::<f64>()
        .sqrt()
}

fn host(b: &CpuBackend, buf: &<CpuBackend as Backend>::Buffer) -> Vec<f32> {
    let mut out = vec![0.0; b.buffer_len(buf)];
    b.download(buf, &mut out).unwrap();
    out
}

fn xent() -> SoftmaxCrossEntropy {
    SoftmaxCrossEntropy {
        label_smoothing: 0.1,
    }
}

fn pseudo_random(len: usize, seed: u64) -> Vec<f32> {
    standard_normal(seed, 7, len)
}

#[test]
fn parameter_counts_match_torchvision_and_the_cifar_resnet() {
    let b = &CpuBackend::new();
    let r50 = ResNet::new(b, &ResNetConfig::resnet50(1000)).unwrap();
    assert_eq!(r50.parameter_count(), 25_557_032);
    let r20 = ResNet::new(b, &ResNetConfig::resnet20(10)).unwrap();
    // 0.27 M: the CIFAR ResNet-20 with 1×1 projection shortcuts at the two stage changes.
    assert_eq!(r20.parameter_count(), 272_474);
    let r18 = ResNet::new(b, &ResNetConfig::resnet18(16, 10, Stem::ImageNet)).unwrap();
    assert_eq!(r18.parameter_count(), 703_386);
}

/// Names, kinds and shapes in `named_parameters()` order, exactly as PyTorch lists them
/// in each fixture; and `Model::parameters` walks the same names with buffers of the
/// same sizes.
#[test]
fn state_dict_names_and_shapes_match_pytorch() {
    let b = &CpuBackend::new();
    for (name, config) in [
        ("resnet50", ResNetConfig::resnet50(1000)),
        ("resnet20", ResNetConfig::resnet20(10)),
        ("resnet18n", ResNetConfig::resnet18(16, 10, Stem::ImageNet)),
    ] {
        let fx = fixture(name);
        let mut model = ResNet::new(b, &config).unwrap();
        let specs = model.param_specs();
        let expected = fx["params"].as_array().unwrap();
        assert_eq!(specs.len(), expected.len(), "{name}");
        for (spec, want) in specs.iter().zip(expected) {
            assert_eq!(spec.name, want["name"].as_str().unwrap(), "{name}");
            let shape: Vec<usize> = want["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as usize)
                .collect();
            assert_eq!(spec.shape, shape, "{name} {}", spec.name);
            let kind = match want["kind"].as_str().unwrap() {
                "ConvWeight" => ParamKind::ConvWeight,
                "FcWeight" => ParamKind::LinearWeight,
                "FcBias" => ParamKind::LinearBias,
                "BnGamma" => ParamKind::BatchNormGamma,
                "BnBeta" => ParamKind::BatchNormBeta,
                other => panic!("unknown kind {other}"),
            };
            assert_eq!(spec.kind, kind, "{name} {}", spec.name);
        }
        let params = model.parameters();
        assert_eq!(params.len(), specs.len());
        for (p, spec) in params.iter().zip(&specs) {
            assert_eq!(p.name, spec.name);
            assert_eq!(p.param.kind, spec.kind);
            let len: usize = spec.shape.iter().product();
            assert_eq!(b.buffer_len(p.param.value), len, "{}", p.name);
            assert_eq!(b.buffer_len(p.param.grad), len, "{}", p.name);
        }
    }
    let r50 = ResNet::new(b, &ResNetConfig::resnet50(1000)).unwrap();
    let names: Vec<String> = r50.param_specs().into_iter().map(|s| s.name).collect();
    for expected in [
        "conv1.weight",
        "bn1.weight",
        "bn1.bias",
        "layer1.0.conv1.weight",
        "layer1.0.bn1.weight",
        "layer1.0.downsample.0.weight",
        "layer1.0.downsample.1.weight",
        "layer4.2.conv3.weight",
        "fc.weight",
        "fc.bias",
    ] {
        assert!(names.iter().any(|n| n == expected), "{expected} missing");
    }
}

#[test]
fn output_shapes_follow_classes_and_batch() {
    let b = &CpuBackend::new();
    let cases = [
        (ResNetConfig::resnet50(1000), 3, 32, 1000),
        (ResNetConfig::resnet50(7), 2, 64, 7),
        (ResNetConfig::resnet20(10), 5, 32, 10),
        (ResNetConfig::resnet18(8, 4, Stem::Small), 3, 16, 4),
        (ResNetConfig::resnet18(8, 6, Stem::ImageNet), 2, 40, 6),
    ];
    for (config, n, px, classes) in cases {
        let mut model = ResNet::new(b, &config).unwrap();
        model.init_from_seed(b, 3).unwrap();
        assert_eq!(model.classes(), classes);
        let shape = [n, px, px, 3];
        let images = T::from_host(b, &shape, &pseudo_random(shape.iter().product(), 1)).unwrap();
        for training in [true, false] {
            let logits = model.forward(b, &images, training).unwrap();
            assert_eq!(logits.shape(), &[n, classes], "{config:?}");
            assert!(!logits.has_non_finite(b).unwrap());
        }
    }
}

/// Eval mode normalises with the running statistics, leaves them alone and gives the
/// same logits every time; training mode updates them.
#[test]
fn eval_mode_is_deterministic_and_leaves_running_statistics_alone() {
    let b = &CpuBackend::new();
    let mut model = ResNet::new(b, &ResNetConfig::resnet20(10)).unwrap();
    model.init_from_seed(b, 5).unwrap();
    let shape = [4, 16, 16, 3];
    let images = T::from_host(b, &shape, &pseudo_random(shape.iter().product(), 2)).unwrap();
    model.forward(b, &images, true).unwrap();
    let stats = |m: &ResNet<CpuBackend>| -> Vec<f32> {
        m.batch_norms()
            .iter()
            .flat_map(|(_, bn)| {
                let mut v = host(b, &bn.state.running_mean);
                v.extend(host(b, &bn.state.running_var));
                v
            })
            .collect()
    };
    let before = stats(&model);
    let first = model
        .forward(b, &images, false)
        .unwrap()
        .to_host(b)
        .unwrap();
    let second = model
        .forward(b, &images, false)
        .unwrap()
        .to_host(b)
        .unwrap();
    assert_eq!(first, second);
    assert_eq!(
        stats(&model),
        before,
        "eval mode changed running statistics"
    );
    let train_logits = model.forward(b, &images, true).unwrap().to_host(b).unwrap();
    assert_ne!(
        stats(&model),
        before,
        "training mode updates running statistics"
    );
    assert_ne!(train_logits, first, "training mode uses batch statistics");
}

/// Plain SGD on one fixed batch drives the loss down: the backward reaches every layer
/// with gradients of the right sign.
#[test]
fn sgd_steps_on_a_fixed_batch_reduce_the_loss() {
    let b = &CpuBackend::new();
    for config in [
        ResNetConfig::resnet20(4),
        ResNetConfig::resnet18(8, 4, Stem::Small),
    ] {
        let mut model = ResNet::new(b, &config).unwrap();
        model.init_from_seed(b, 11).unwrap();
        let shape = [8, 16, 16, 3];
        let images = T::from_host(b, &shape, &pseudo_random(shape.iter().product(), 4)).unwrap();
        let labels = T::from_host(b, &[8], &[0., 1., 2., 3., 3., 2., 1., 0.]).unwrap();
        let mut losses = Vec::new();
        for _ in 0..8 {
            let logits = model.forward(b, &images, true).unwrap();
            losses.push(
                xent()
                    .forward(b, &logits, &labels)
                    .unwrap()
                    .loss
                    .to_host(b)
                    .unwrap()[0],
            );
            let dlogits = xent().backward(b, &logits, &labels).unwrap();
            model.backward(b, &dlogits).unwrap();
            for p in model.parameters() {
                b.axpy(-0.1, p.param.grad, p.param.value).unwrap();
            }
        }
        assert!(
            losses[7] < 0.5 * losses[0],
            "{config:?}: loss did not fall: {losses:?}"
        );
    }
}

/// One training-mode forward and backward of `model` on the fixture's input and
/// weights (both from the counter generator), compared with PyTorch.
///
/// Tolerances: the loss within 1e-4 relative of PyTorch's float64 run; logits within
/// 1e-3 absolute; every gradient norm and running-statistics norm within
/// 3e-3 + 4·gap relative of PyTorch's float64 run, where gap is the relative difference
/// between PyTorch's own float32 and float64 runs. Batch-norm parameter gradients sum
/// many terms that cancel, so float32 rounding alone moves some of them by up to 0.6 %
/// (PyTorch's float32 against its float64) and the per-norm gap is only one sample of
/// that noise.
fn reference_check(name: &str, config: ResNetConfig) {
    let fx = fixture(name);
    let b = &CpuBackend::new();
    let seed = fx["seed"].as_u64().unwrap();
    let mut model = ResNet::new(b, &config).unwrap();
    let specs = model.param_specs();
    let expected_params = fx["params"].as_array().unwrap();
    let mut checksums = Vec::new();
    model
        .init_with(b, |index, pname, kind, shape| {
            let kind = tinyperf::engine::optim::ParamKind::from_torch_name(pname)
                .unwrap_or_else(|| panic!("{pname}: no kind ({kind:?})"));
            let v = tinyperf::engine::init::init_param(kind, shape, seed, index as u64).unwrap();
            checksums.push(checksum(&v));
            v
        })
        .unwrap();
    for ((spec, sum), want) in specs.iter().zip(&checksums).zip(expected_params) {
        assert_eq!(
            *sum,
            want["checksum"].as_u64().unwrap(),
            "{name}: initial values of {} differ from PyTorch's",
            spec.name
        );
    }
    // init_from_seed gives the same values.
    let mut seeded = ResNet::new(b, &config).unwrap();
    seeded.init_from_seed(b, seed).unwrap();
    for (p, q) in seeded.parameters().iter().zip(model.parameters().iter()) {
        assert_eq!(host(b, p.param.value), host(b, q.param.value), "{}", p.name);
    }
    drop(seeded);

    let input = &fx["input"];
    let nchw: Vec<usize> = input["shape_nchw"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as usize)
        .collect();
    let (n, c, h, w) = (nchw[0], nchw[1], nchw[2], nchw[3]);
    let values = standard_normal(seed, input["stream"].as_u64().unwrap(), n * c * h * w);
    assert_eq!(checksum(&values), input["checksum"].as_u64().unwrap());
    let images = T::from_host(
        b,
        &[n, h, w, c],
        &nchw_to_nhwc(&values, n, c, h, w).unwrap(),
    )
    .unwrap();
    let labels: Vec<f32> = fx["labels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as f32)
        .collect();
    let labels = T::from_host(b, &[n], &labels).unwrap();

    let logits = model.forward(b, &images, true).unwrap();
    let loss = xent()
        .forward(b, &logits, &labels)
        .unwrap()
        .loss
        .to_host(b)
        .unwrap()[0];
    let dlogits = xent().backward(b, &logits, &labels).unwrap();
    model.backward(b, &dlogits).unwrap();

    let (fp32, fp64) = (&fx["fp32"], &fx["fp64"]);
    let mut failures = Vec::new();
    let mut worst = 0.0f64;
    let mut bound = |key: &str, a: f64, b32: f64, b64: f64| {
        let gap = (b32 - b64).abs() / b64.abs().max(1e-30);
        let tol = 3e-3 + 4.0 * gap;
        let err = (a - b64).abs() / b64.abs().max(1e-30);
        worst = worst.max(err / tol);
        if err > tol {
            failures.push(format!(
                "{key}: ours {a}, PyTorch fp64 {b64} (fp32 {b32}): relative error {err:.2e} > {tol:.2e}"
            ));
        }
    };
    let want_loss = f64_of(&fp64["loss"]);
    let loss_err = (f64::from(loss) - want_loss).abs() / want_loss;
    assert!(
        loss_err <= 1e-4,
        "{name} loss: ours {loss}, PyTorch {want_loss}: relative error {loss_err:.2e}"
    );
    let logits = logits.to_host(b).unwrap();
    let classes = config.classes;
    for (row, want_row) in fp64["logits_first10"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
    {
        for (col, want) in want_row.as_array().unwrap().iter().enumerate() {
            let ours = f64::from(logits[row * classes + col]);
            assert!(
                (ours - f64_of(want)).abs() <= 1e-3,
                "{name} logit [{row}, {col}]: ours {ours}, PyTorch {want}"
            );
        }
    }
    bound(
        "logits norm",
        norm(&logits),
        f64_of(&fp32["logits_norm"]),
        f64_of(&fp64["logits_norm"]),
    );
    let mut checked = 0;
    for p in model.parameters() {
        let g = norm(&host(b, p.param.grad));
        bound(
            &format!("grad norm {}", p.name),
            g,
            f64_of(&fp32["grad_norms"][&p.name]),
            f64_of(&fp64["grad_norms"][&p.name]),
        );
        checked += 1;
    }
    assert_eq!(checked, specs.len());
    for (bn_name, bn) in model.batch_norms() {
        for (key, buf) in [
            ("mean_norm", &bn.state.running_mean),
            ("var_norm", &bn.state.running_var),
        ] {
            bound(
                &format!("{bn_name} running {key}"),
                norm(&host(b, buf)),
                f64_of(&fp32["running_stats"][&bn_name][key]),
                f64_of(&fp64["running_stats"][&bn_name][key]),
            );
        }
    }
    eprintln!("{name}: worst error / tolerance {worst:.3}");
    assert!(failures.is_empty(), "{name}:\n{}", failures.join("\n"));
}

#[test]
fn resnet20_forward_and_backward_match_pytorch() {
    reference_check("resnet20", ResNetConfig::resnet20(10));
}

#[test]
fn narrow_resnet18_forward_and_backward_match_pytorch() {
    reference_check("resnet18n", ResNetConfig::resnet18(16, 10, Stem::ImageNet));
}

#[test]
fn resnet50_forward_and_backward_match_pytorch() {
    reference_check("resnet50", ResNetConfig::resnet50(1000));
}
