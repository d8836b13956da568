use super::*;
use crate::engine::model::resnet::ResNet;
use crate::engine::CpuBackend;

fn resnet50_224() -> NetworkShape {
    NetworkShape::new(&ResNetConfig::resnet50(1000), 224)
}

#[test]
fn resnet50_has_torchvisions_parameter_count_and_macs() {
    let net = resnet50_224();
    assert_eq!(net.parameter_count(), 25_557_032);
    // torchvision's resnet50 (v1.5, stride on the 3×3) reports 4.09 GMACs at 224².
    assert_eq!(net.forward_macs(), 4_089_184_256);
    assert_eq!(net.convs().len(), 53);
}

#[test]
fn conv_shapes_match_the_model_the_engine_trains() {
    let backend = CpuBackend::new();
    let model = ResNet::new(&backend, &ResNetConfig::resnet50(1000)).unwrap();
    let specs = model.param_specs();
    let net = resnet50_224();
    for conv in net.convs() {
        let spec = specs
            .iter()
            .find(|s| s.name == format!("{}.weight", conv.name))
            .unwrap_or_else(|| panic!("{} is not a parameter of the model", conv.name));
        assert_eq!(
            spec.shape,
            vec![conv.out_c, conv.in_c, conv.kernel, conv.kernel],
            "{}",
            conv.name
        );
    }
    assert_eq!(net.parameter_count() as usize, model.parameter_count());
}

#[test]
fn activation_sides_are_resnet50s() {
    let net = resnet50_224();
    assert_eq!(net.stem.out_side, 112);
    assert_eq!(net.stem_pool, Some((112, 56)));
    let side = |name: &str| {
        let b = net.blocks.iter().find(|b| b.name == name).unwrap();
        (b.units[0].in_side, b.units.last().unwrap().out_side)
    };
    assert_eq!(side("layer1.0"), (56, 56));
    assert_eq!(side("layer2.0"), (56, 28));
    assert_eq!(side("layer3.0"), (28, 14));
    assert_eq!(side("layer4.2"), (7, 7));
    assert_eq!(net.blocks[0].output_elems(), 56 * 56 * 256);
    assert_eq!(net.blocks.last().unwrap().output_elems(), 7 * 7 * 2048);
}

#[test]
fn step_flops_are_three_passes_less_the_stem_data_gradient() {
    let c = resnet50_step(256, 224, Precision::Fp16);
    let net = resnet50_224();
    let conv_fc: u64 = c
        .today
        .iter()
        .filter(|k| {
            matches!(k.category, Category::Conv | Category::Gemm1x1)
                || k.name == "fc forward"
                || k.name == "fc backward"
        })
        .map(|k| k.flops)
        .sum();
    let expected = 256 * 2 * (3 * net.forward_macs() - net.stem.macs());
    assert_eq!(conv_fc, expected);
    // The elementwise work is a few percent of the total at most.
    assert!(c.flops > expected && (c.flops as f64) < expected as f64 * 1.02);
}

#[test]
fn a_residual_add_moves_three_activations() {
    let c = resnet50_step(256, 224, Precision::Fp16);
    let add = c
        .today
        .iter()
        .find(|k| k.name == "layer1.0 residual add")
        .unwrap();
    let e = 256 * 56 * 56 * 256;
    assert_eq!((add.bytes_read, add.bytes_written), (2 * e * 2, e * 2));
}

#[test]
fn the_floor_moves_less_than_today_and_the_same_conv_operands() {
    for precision in [Precision::Fp32, Precision::Fp16] {
        let c = resnet50_step(256, 224, precision);
        let group = |cat: Category| c.categories.iter().find(|k| k.category == cat).unwrap();
        // Convolution operands are counted alike in both schedules.
        for cat in [Category::Conv, Category::Gemm1x1] {
            assert_eq!(
                group(cat).floor_bytes,
                group(cat).today_bytes,
                "{precision:?}"
            );
        }
        // Fused passes stand in for several of today's groups (the floor's ReLU+BN
        // backward for today's ReLU backward and BN dx), so compare the groups together.
        let elementwise = |bytes: fn(&CategoryCost) -> u64| {
            c.categories
                .iter()
                .filter(|k| !matches!(k.category, Category::Conv | Category::Gemm1x1))
                .map(bytes)
                .sum::<u64>()
        };
        let (today, floor) = (
            elementwise(|k| k.today_bytes),
            elementwise(|k| k.floor_bytes),
        );
        assert!(floor * 10 < today * 6, "{precision:?}: {floor} vs {today}");
        assert!(c.floor_bytes < c.today_bytes, "{precision:?}");
        // The shortcut-gradient add and the standalone ReLUs fold into neighbouring passes.
        assert!(
            group(Category::ResidualAdd).floor_bytes * 5 < group(Category::ResidualAdd).today_bytes
        );
        assert_eq!(group(Category::Relu).floor_bytes, 0);
        // The floor's optimizer writes the 16-bit weight copies today's convs make
        // themselves (counted under "other").
        let opt =
            |k: fn(&CategoryCost) -> u64| k(group(Category::Optimizer)) + k(group(Category::Other));
        assert!(
            opt(|k| k.floor_bytes) < opt(|k| k.today_bytes),
            "{precision:?}"
        );
    }
}

#[test]
fn sixteen_bit_storage_halves_the_activation_traffic() {
    let f32 = resnet50_step(256, 224, Precision::Fp32);
    let f16 = resnet50_step(256, 224, Precision::Fp16);
    let ratio = f16.floor_bytes as f64 / f32.floor_bytes as f64;
    // Activations halve; f32 master weights and optimizer state do not.
    assert!((0.5..0.56).contains(&ratio), "{ratio}");
    assert_eq!(f16.flops, f32.flops);
}

#[test]
fn time_floors_follow_the_spec_sheets() {
    let c = resnet50_step(256, 224, Precision::Fp16);
    let h200 = &c.devices[0];
    assert_eq!(h200.gpu.name, "H200 SXM");
    assert!((h200.memory_s - c.floor_bytes as f64 / 4.8e12).abs() < 1e-12);
    assert!((h200.compute_s - c.flops as f64 / 989e12).abs() < 1e-12);
    for d in &c.devices {
        assert!(
            d.roofline_s >= d.memory_s.max(d.compute_s) * 0.999,
            "{}",
            d.gpu.name
        );
        assert!(d.roofline_s <= d.memory_s + d.compute_s, "{}", d.gpu.name);
    }
    // A 4090 is compute-bound at 165 TFLOPS: 256 images of ~24.5 GFLOPs take ≥ 38 ms.
    let rtx = &c.devices[1];
    assert!(
        rtx.compute_s > 0.037 && rtx.compute_s < 0.040,
        "{}",
        rtx.compute_s
    );
}

#[test]
fn costs_scale_with_the_batch() {
    let one = resnet50_step(1, 224, Precision::Fp16);
    let many = resnet50_step(64, 224, Precision::Fp16);
    assert!(many.flops > 63 * one.flops && many.flops < 64 * one.flops + 64);
    assert_eq!(one.parameters, many.parameters);
}
