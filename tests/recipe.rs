//! The training recipe against its references: the counter generator and initialisers
//! against the numbers `scripts/torch_reference.py` fed to PyTorch (bit for bit), the
//! optimizer split against the reference's name rule, and the recipe's options, eval
//! cadence and LR schedule against the v4.0 tinybox recipe.

use serde_json::{json, Map, Value};
use tinyperf::engine::init::{self, checksum};
use tinyperf::engine::mllog::RunConfig;
use tinyperf::engine::optim::{
    in_skip_list, l2_norm, lars_trust_ratio, torch_name_in_skip_list, ParamKind,
};
use tinyperf::engine::recipe::{Recipe, RecipeError, OPTION_KEYS};
use tinyperf::engine::rng::CounterRng;

/// The fixtures `scripts/torch_reference.py` writes, one per model.
const FIXTURES: &[(&str, &str)] = &[
    (
        "resnet50",
        include_str!("fixtures/torch/resnet50_reference.json"),
    ),
    (
        "resnet20",
        include_str!("fixtures/torch/resnet20_reference.json"),
    ),
    (
        "resnet18n",
        include_str!("fixtures/torch/resnet18n_reference.json"),
    ),
];

fn fixture(model: &str) -> Value {
    let (_, text) = FIXTURES
        .iter()
        .find(|(name, _)| *name == model)
        .expect("known fixture");
    serde_json::from_str(text).expect("fixture is JSON")
}

fn u64_of(v: &Value) -> u64 {
    match v {
        Value::String(s) => s.parse().expect("u64 string"),
        other => other.as_u64().expect("u64"),
    }
}

fn kind_of(name: &str) -> ParamKind {
    match name {
        "ConvWeight" => ParamKind::ConvWeight,
        "FcWeight" => ParamKind::LinearWeight,
        "FcBias" => ParamKind::LinearBias,
        "BnGamma" => ParamKind::BatchNormGamma,
        "BnBeta" => ParamKind::BatchNormBeta,
        other => panic!("unknown kind {other}"),
    }
}

fn shape_of(v: &Value) -> Vec<usize> {
    v.as_array()
        .expect("shape")
        .iter()
        .map(|d| d.as_u64().expect("dim") as usize)
        .collect()
}

fn first_bits(values: &[f32], count: usize) -> Vec<u64> {
    values
        .iter()
        .take(count)
        .map(|v| u64::from(v.to_bits()))
        .collect()
}

#[test]
fn rng_reproduces_the_python_twin_bit_for_bit() {
    let fx = fixture("resnet20");
    let samples = &fx["rng_samples"];
    let rng = CounterRng::new(u64_of(&samples["seed"]), u64_of(&samples["stream"]));
    let bits = samples["bits"].as_array().unwrap();
    let uniforms = samples["uniform_f64_bits"].as_array().unwrap();
    let normals = samples["normal_f64_bits"].as_array().unwrap();
    assert!(!bits.is_empty());
    for (i, expected) in bits.iter().enumerate() {
        assert_eq!(rng.bits(i as u64), u64_of(expected), "bits[{i}]");
        assert_eq!(
            rng.uniform(i as u64).to_bits(),
            u64_of(&uniforms[i]),
            "uniform[{i}]"
        );
        assert_eq!(
            rng.normal(i as u64).to_bits(),
            u64_of(&normals[i]),
            "normal[{i}]"
        );
    }
}

#[test]
fn every_model_parameter_and_input_matches_what_pytorch_was_given() {
    for (model, _) in FIXTURES {
        let spec = fixture(model);
        assert_eq!(spec["model"].as_str(), Some(*model));
        let seed = u64_of(&spec["seed"]);
        let params = spec["params"].as_array().unwrap();
        assert!(params.len() > 20, "{model}: {} parameters", params.len());
        for p in params {
            let name = p["name"].as_str().unwrap();
            let kind = kind_of(p["kind"].as_str().unwrap());
            assert_eq!(
                ParamKind::from_torch_name(name),
                Some(kind),
                "{model} {name}"
            );
            assert_eq!(
                in_skip_list(kind),
                torch_name_in_skip_list(name),
                "{model} {name}"
            );
            let shape = shape_of(&p["shape"]);
            let values = init::init_param(kind, &shape, seed, u64_of(&p["stream"]))
                .unwrap_or_else(|| panic!("{model} {name}: shape {shape:?} does not fit {kind:?}"));
            assert_eq!(values.len(), shape.iter().product::<usize>());
            let expected_first: Vec<u64> = p["first_bits"]
                .as_array()
                .unwrap()
                .iter()
                .map(u64_of)
                .collect();
            assert_eq!(
                first_bits(&values, expected_first.len()),
                expected_first,
                "{model} {name}: first values"
            );
            assert_eq!(
                checksum(&values),
                u64_of(&p["checksum"]),
                "{model} {name}: checksum"
            );
        }
        let input = &spec["input"];
        let shape = shape_of(&input["shape_nchw"]);
        let x = init::standard_normal(
            u64_of(&input["seed"]),
            u64_of(&input["stream"]),
            shape.iter().product(),
        );
        assert_eq!(
            checksum(&x),
            u64_of(&input["checksum"]),
            "{model} input checksum"
        );
    }
}

#[test]
fn reference_trust_ratios_follow_from_our_weights_and_torch_gradient_norms() {
    // The fixture's one-step LARS figures were computed from PyTorch's gradients; the
    // trust ratio needs only the norms, so ours must agree to float32 precision.
    let spec = &fixture("resnet20");
    let seed = u64_of(&spec["seed"]);
    let step = &spec["fp64"]["one_step"];
    let (wd, tcoef) = (
        step["weight_decay"].as_f64().unwrap() as f32,
        step["trust_coefficient"].as_f64().unwrap() as f32,
    );
    let mut checked = 0;
    for p in spec["params"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        let kind = kind_of(p["kind"].as_str().unwrap());
        let values =
            init::init_param(kind, &shape_of(&p["shape"]), seed, u64_of(&p["stream"])).unwrap();
        let g_norm = spec["fp64"]["grad_norms"][name].as_f64().unwrap() as f32;
        let expected = step["params"][name]["trust_ratio"].as_f64().unwrap();
        let trust = if in_skip_list(kind) {
            lars_trust_ratio(l2_norm(&values), g_norm, 0.0, 0.0, 0.0)
        } else {
            lars_trust_ratio(l2_norm(&values), g_norm, wd, tcoef, 0.0)
        };
        assert!(
            (f64::from(trust) - expected).abs() <= 1e-5 * expected.abs(),
            "{name}: trust {trust} vs {expected}"
        );
        checked += 1;
    }
    assert!(checked > 20);
}

#[test]
fn nhwc_twin_of_the_input_holds_the_same_values() {
    let x = init::standard_normal(42, 1_000_000, 2 * 3 * 4 * 5);
    let nhwc = init::nchw_to_nhwc(&x, 2, 3, 4, 5).unwrap();
    // Element (n=1, c=2, h=3, w=4).
    assert_eq!(
        nhwc[((4 + 3) * 5 + 4) * 3 + 2],
        x[((3 + 2) * 4 + 3) * 5 + 4]
    );
    let mut sorted_a = x.clone();
    let mut sorted_b = nhwc.clone();
    sorted_a.sort_by(f32::total_cmp);
    sorted_b.sort_by(f32::total_cmp);
    assert_eq!(sorted_a, sorted_b);
}

fn options(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

#[test]
fn defaults_are_the_v4_tinybox_recipe() {
    let r = Recipe::default();
    assert_eq!(r.global_batch_size, 1536);
    assert_eq!(r.base_lr, 7.2);
    assert_eq!(r.warmup_epochs, 2);
    assert_eq!(r.train_epochs, 37);
    assert_eq!(r.end_lr, 1e-4);
    assert!((r.weight_decay() - 2e-4).abs() < 1e-18);
    assert_eq!(r.momentum, 0.9);
    assert_eq!(r.lars_epsilon, 0.0);
    assert_eq!(r.lars_trust_coefficient, 0.001);
    assert_eq!(r.label_smoothing, 0.1);
    assert_eq!(r.target_accuracy, 0.759);
    let c = r.lars_config();
    assert_eq!(
        (c.momentum, c.trust_coefficient, c.epsilon),
        (0.9, 0.001, 0.0)
    );
    assert!((c.weight_decay - 2e-4).abs() < 1e-10);
    assert!(r.validate().is_ok());
    assert!(Recipe::smoke().validate().is_ok());
}

#[test]
fn eval_epochs_are_4n_plus_3_then_every_epoch_from_33() {
    let r = Recipe::default();
    let evals: Vec<u32> = (0..=40).filter(|&e| r.is_eval_epoch(e)).collect();
    let mut expected: Vec<u32> = (3..=31).step_by(4).collect();
    expected.extend(33..=40);
    assert_eq!(evals, expected);
    // The smoke preset evaluates every epoch.
    let s = Recipe::smoke();
    assert!((1..=s.train_epochs).all(|e| s.is_eval_epoch(e)));
    assert!(!s.is_eval_epoch(0));
}

#[test]
fn the_last_planned_epoch_is_always_evaluated() {
    let r = Recipe::from_options(&options(json!({"train_epochs": 10}))).unwrap();
    let evals: Vec<u32> = (1..=10).filter(|&e| r.is_eval_epoch(e)).collect();
    assert_eq!(evals, vec![3, 7, 10]);
}

#[test]
fn reference_steps_and_learning_rates() {
    let r = Recipe::default();
    let spe = r.steps_per_epoch(1_281_167);
    assert_eq!(spe, 835);
    assert_eq!(r.lr_at(0, spe).unwrap(), 0.0);
    assert!((r.lr_at(835, spe).unwrap() - 3.6).abs() < 1e-12);
    assert_eq!(r.lr_at(1670, spe).unwrap(), 7.2);
    assert!((r.lr_at(10 * 835, spe).unwrap() - 4.285).abs() < 1e-3);
    let last = r.lr_at(37 * 835 - 1, spe).unwrap();
    assert!(last > 1e-4 && last < 1e-4 + 1e-6, "{last}");
    assert_eq!(r.lr_at(100 * 835, spe).unwrap(), 1e-4);
    let schedule = r.schedule(spe).unwrap();
    assert_eq!(
        (schedule.warmup_steps(), schedule.total_steps()),
        (1670, 30895)
    );
    assert!(
        r.lr_at(0, 0).is_err(),
        "an epoch of no steps has no schedule"
    );
}

#[test]
fn options_override_and_scale_the_lr_with_the_batch() {
    let r = Recipe::from_options(&options(json!({
        "batch_size": 768, "warmup_epochs": 5, "train_epochs": 40, "seed": 1234,
        "weight_decay_n": 2, "target_accuracy": 0.75, "eval_every": 2,
        "unrelated_suite_option": "kept for others"
    })))
    .unwrap();
    assert_eq!(r.global_batch_size, 768);
    assert!(
        (r.base_lr - 3.6).abs() < 1e-12,
        "LR scales with the batch: {}",
        r.base_lr
    );
    assert_eq!((r.warmup_epochs, r.train_epochs, r.seed), (5, 40, 1234));
    assert!((r.weight_decay() - 4e-4).abs() < 1e-18);
    assert_eq!(r.target_accuracy, 0.75);
    // An explicit base LR is taken as is.
    let r = Recipe::from_options(&options(json!({"batch_size": 768, "base_lr": 5.0}))).unwrap();
    assert_eq!(r.base_lr, 5.0);
    let r = Recipe::from_options(&options(json!({"weight_decay": 5e-5}))).unwrap();
    assert_eq!(r.weight_decay(), 5e-5);
    // Options apply on top of the smoke preset too.
    let s = Recipe::smoke()
        .with_options(&options(json!({"batch_size": 64})))
        .unwrap();
    assert!((s.base_lr - Recipe::smoke().base_lr / 2.0).abs() < 1e-12);
    assert_eq!(s.eval_every, 1);
}

#[test]
fn out_of_range_and_malformed_options_are_clear_errors() {
    let cases = [
        (json!({"base_lr": -1.0}), "base_lr = -1 is out of range"),
        (
            json!({"base_lr": 0}),
            "base_lr = 0 is out of range (0, 1000]",
        ),
        (
            json!({"momentum": 1.0}),
            "momentum = 1 is out of range [0, 1)",
        ),
        (
            json!({"label_smoothing": 1.5}),
            "label_smoothing = 1.5 is out of range",
        ),
        (json!({"batch_size": 0}), "batch_size = 0 is out of range"),
        (
            json!({"batch_size": 12.5}),
            "batch_size must be a whole number",
        ),
        (
            json!({"train_epochs": "many"}),
            "train_epochs must be a number",
        ),
        (
            json!({"target_accuracy": 1.2}),
            "target_accuracy = 1.2 is out of range",
        ),
        (
            json!({"lars_epsilon": -0.1}),
            "lars_epsilon = -0.1 is out of range",
        ),
        (
            json!({"warmup_epochs": 10, "train_epochs": 5}),
            "warmup_epochs (10) exceeds train_epochs (5)",
        ),
        (
            json!({"end_lr": 9.0}),
            "end_lr (9) must lie between 0 and base_lr (7.2)",
        ),
        (
            json!({"weight_decay": 1e-4, "weight_decay_n": 1}),
            "not both",
        ),
        (json!({"eval_every": 0}), "eval_every = 0 is out of range"),
        (
            json!({"crop_min_scale": 0}),
            "crop_min_scale = 0 is out of range (0, 1]",
        ),
        (
            json!({"crop_min_scale": 1.5}),
            "crop_min_scale = 1.5 is out of range",
        ),
    ];
    for (opts, needle) in cases {
        let err = Recipe::from_options(&options(opts.clone())).unwrap_err();
        let text = err.to_string();
        assert!(text.contains(needle), "{opts}: {text:?} lacks {needle:?}");
    }
    let r = Recipe::from_options(&options(json!({"crop_min_scale": 0.5}))).unwrap();
    assert_eq!(r.crop_min_scale, 0.5);
    assert_eq!(
        Recipe::mlperf().crop_min_scale,
        0.10,
        "the reference's crop"
    );
    let r = Recipe::from_options(&options(json!({"seed": u64::MAX}))).unwrap();
    assert_eq!(r.seed, u64::MAX, "seeds keep all 64 bits");
    assert!(Recipe::from_options(&options(json!({"seed": 1.5}))).is_err());
    let err = Recipe::from_options(&options(json!({"momentum": 2}))).unwrap_err();
    assert!(matches!(err, RecipeError::OutOfRange { ref key, .. } if key == "momentum"));
    assert!(
        err.to_string().contains("momentum of LARS"),
        "help text: {err}"
    );
}

#[test]
fn every_documented_option_key_is_read() {
    // Each key, given a value outside every range, must be rejected: proof that it is read.
    for key in OPTION_KEYS.iter().map(|o| o.key) {
        let err = Recipe::from_options(&options(json!({ key: -1e9 })));
        assert!(err.is_err(), "option {key} is documented but ignored");
    }
}

#[test]
fn default_recipe_logs_what_the_tinybox_submission_logged() {
    let logged = Recipe {
        seed: 77,
        ..Recipe::default()
    }
    .mllog_config(1_281_167, 50_000, 256);
    assert_eq!(logged, RunConfig::tinybox_v4_0(77));
    assert!(logged.closed_division_violations().is_empty());
    // A weight decay off the 1e-4·2^N grid is visible to the closed-division check.
    let off_grid = Recipe::from_options(&options(json!({"weight_decay": 3e-4})))
        .unwrap()
        .mllog_config(1_281_167, 50_000, 256);
    assert!(!off_grid.closed_division_violations().is_empty());
}

#[test]
fn precision_options_choose_the_storage_and_the_fp16_loss_scaling() {
    use tinyperf::engine::train::LossScaling;
    use tinyperf::engine::Precision;
    let reference = Recipe::mlperf();
    assert_eq!(reference.precision, Precision::Fp32);
    assert_eq!(reference.loss_scaling(), LossScaling::None);

    let fp16 = reference
        .with_options(&options(json!({"precision": "fp16"})))
        .unwrap();
    assert_eq!(fp16.precision, Precision::Fp16);
    // The v4.0 reference's static scale.
    assert_eq!(fp16.loss_scaling(), LossScaling::Static(128.0));
    let dynamic = reference
        .with_options(&options(
            json!({"precision": "fp16", "loss_scale": 65536, "dynamic_loss_scale": true}),
        ))
        .unwrap();
    // 1 and 0 still read as the flag they once stood for.
    let dynamic_by_number = reference
        .with_options(&options(
            json!({"precision": "fp16", "loss_scale": 65536, "dynamic_loss_scale": 1}),
        ))
        .unwrap();
    assert_eq!(dynamic_by_number, dynamic);
    assert_eq!(
        dynamic.loss_scaling(),
        LossScaling::Dynamic {
            initial: 65536.0,
            growth_interval: 2000
        }
    );
    // bf16 has f32's exponent range: no scaling, whatever the scale option says.
    let bf16 = reference
        .with_options(&options(json!({"precision": "bf16", "loss_scale": 1024})))
        .unwrap();
    assert_eq!(bf16.loss_scaling(), LossScaling::None);

    for (bad, says) in [
        (json!({"precision": "fp8"}), "fp32, fp16, bf16"),
        (json!({"precision": 16}), "fp32, fp16, bf16"),
        (json!({"loss_scale": 0.5}), "loss_scale"),
        (json!({"loss_scale": 1e9}), "loss_scale"),
        (json!({"dynamic_loss_scale": 2}), "dynamic_loss_scale"),
    ] {
        let err = reference.with_options(&options(bad.clone())).unwrap_err();
        assert!(err.to_string().contains(says), "{bad}: {err}");
    }
    // A stored recipe from before these fields reads with their defaults.
    let mut stored = serde_json::to_value(&reference).unwrap();
    for key in ["precision", "loss_scale", "dynamic_loss_scale"] {
        stored.as_object_mut().unwrap().remove(key);
    }
    let read: Recipe = serde_json::from_value(stored).unwrap();
    assert_eq!(read, reference);
    assert!(OPTION_KEYS.iter().any(|o| o.key == "precision"));
}
