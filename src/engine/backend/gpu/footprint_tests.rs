//! What a training step asks of device memory, measured on a stand-in device (no GPU runs
//! here): 16-bit activations take half the bytes of f32 ones, and ResNet-50 at batch 256
//! fits a 24 GiB card (RTX 4090, RX 7900 XTX) with room left for the runtime.

use super::options::{ConvAlgorithm, GpuOptions};
use super::stand_in::StandInDevice;
use super::GpuBackend;
use crate::engine::backend::crosscheck::{check_ops, Tolerances};
use crate::engine::train::{measure_train_throughput, ModelChoice};
use crate::engine::{Backend, Conv2dParams, CpuBackend, EngineError, Precision};

const GIB: usize = 1 << 30;

/// Peak bytes in use and reserved over two ResNet-50 training steps at 224², and how
/// many blocks went back to the runtime.
fn resnet50_step_memory(
    precision: Precision,
    batch: usize,
    capacity: usize,
) -> (usize, usize, usize) {
    resnet50_step_memory_by(ConvAlgorithm::Im2col, precision, batch, capacity)
}

fn resnet50_step_memory_by(
    conv: ConvAlgorithm,
    precision: Precision,
    batch: usize,
    capacity: usize,
) -> (usize, usize, usize) {
    let device = StandInDevice::new(capacity);
    let options = GpuOptions {
        conv,
        ..GpuOptions::default()
    };
    let backend = GpuBackend::with_options(device.clone(), options).with_precision(precision);
    let mut model = ModelChoice::ResNet50
        .build(&backend, 1000, 224, 1)
        .expect("the model fits");
    let report = measure_train_throughput(
        &backend,
        &mut model,
        batch,
        224,
        0,
        2,
        0.1,
        &|| false,
        &mut |_, _, _| {},
    )
    .unwrap_or_else(|e| panic!("{precision} at batch {batch}: {e}"));
    assert!(report.is_some(), "not cancelled");
    let memory = backend.memory();
    assert_eq!(memory.reserved_bytes, device.live_bytes());
    (
        memory.peak_in_use_bytes,
        memory.peak_reserved_bytes,
        device.frees(),
    )
}

#[test]
fn resnet50_at_batch_256_in_16_bits_fits_a_24_gib_card_on_a_stand_in_device() {
    let unlimited = 1 << 50;
    let (f32_in_use, f32_reserved, _) = resnet50_step_memory(Precision::Fp32, 256, unlimited);
    for precision in [Precision::Fp16, Precision::Bf16] {
        let (in_use, reserved, _) = resnet50_step_memory(precision, 256, unlimited);
        // Activations dominate and take half the bytes; weights, their gradients and the
        // optimizer's state stay f32.
        assert!(
            (in_use as f64) < 0.6 * f32_in_use as f64,
            "{precision}: {in_use} bytes in use at the peak against {f32_in_use} in f32"
        );
        // With 4 GiB left for the runtime's context, DNN workspaces and collective
        // buffers, the allocator never has to empty its cache.
        assert!(
            reserved <= 20 * GIB,
            "{precision}: {reserved} bytes reserved (f32: {f32_reserved})"
        );
    }
    // f32 needs more than the 24 GiB cards have once the runtime takes its share.
    assert!(f32_reserved > 20 * GIB, "{f32_reserved}");
}

#[test]
fn implicit_gemm_convolutions_need_no_column_buffer_on_a_stand_in_device() {
    // im2col's column chunks (up to 2^27 elements) are the step's largest scratch; the
    // implicit kernels' only scratch is the split filter gradients' partials.
    let unlimited = 1 << 50;
    let (im2col, _, _) =
        resnet50_step_memory_by(ConvAlgorithm::Im2col, Precision::Fp16, 256, unlimited);
    let (implicit, _, _) =
        resnet50_step_memory_by(ConvAlgorithm::ImplicitGemm, Precision::Fp16, 256, unlimited);
    eprintln!("fp16 ResNet-50 at batch 256, peak in use: im2col {im2col}, implicit {implicit}");
    assert!(
        implicit + 128 * (1 << 20) < im2col,
        "implicit {implicit} bytes at the peak against im2col's {im2col}"
    );
}

#[test]
fn a_step_squeezed_into_less_memory_reuses_the_cache_instead_of_failing_on_a_stand_in_device() {
    let (in_use, reserved, frees) = resnet50_step_memory(Precision::Fp16, 32, 1 << 50);
    assert_eq!(
        frees, 0,
        "nothing goes back to the runtime with room to spare"
    );
    let (squeezed_in_use, _, squeezed_frees) =
        resnet50_step_memory(Precision::Fp16, 32, reserved * 9 / 10);
    assert!(squeezed_frees > 0, "cached blocks went back to make room");
    assert_eq!(
        squeezed_in_use, in_use,
        "the step itself needs what it needed"
    );
}

#[test]
fn every_access_of_every_op_and_a_training_step_lies_inside_a_live_block_on_a_stand_in_device() {
    for precision in [Precision::Fp32, Precision::Fp16, Precision::Bf16] {
        for (device, conv) in [
            (StandInDevice::new(GIB), ConvAlgorithm::Im2col),
            (StandInDevice::with_dnn(GIB), ConvAlgorithm::Auto),
            (StandInDevice::new(GIB), ConvAlgorithm::ImplicitGemm),
        ] {
            let options = GpuOptions {
                conv,
                ..GpuOptions::default()
            };
            let backend = GpuBackend::with_options(device, options).with_precision(precision);
            let label = format!("{precision}, {:?}", backend.conv);
            // The stand-in computes nothing, so the comparisons mean nothing here; every
            // op running without a refused access is what counts.
            check_ops(&backend, &CpuBackend::new(), 1, Tolerances::default())
                .unwrap_or_else(|e| panic!("{label}: {e}"));
            assert_eq!(
                backend.memory().in_use_bytes,
                0,
                "{label}: every block came back"
            );
            let mut model = ModelChoice::ResNet50.build(&backend, 10, 64, 1).unwrap();
            measure_train_throughput(
                &backend,
                &mut model,
                2,
                64,
                0,
                1,
                0.1,
                &|| false,
                &mut |_, _, _| {},
            )
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        }
    }
}

#[test]
fn an_op_output_is_backed_in_the_format_the_op_writes_on_a_stand_in_device() {
    let device = StandInDevice::new(GIB);
    let f32_backend = GpuBackend::new(device);
    let half = f32_backend.with_precision(Precision::Fp16);
    let n = 64 * 1024;
    let a = half.upload(&vec![1.0; n]).unwrap();
    let b = half.upload(&vec![2.0; n]).unwrap();
    let before = half.memory().in_use_bytes;
    let mut out = half.alloc(n).unwrap();
    assert_eq!(half.memory().in_use_bytes, before, "alloc takes no memory");
    half.add(&a, &b, &mut out).unwrap();
    assert_eq!(out.storage(), Precision::Fp16);
    // The operands' 16-bit copies are gone again; the sum stays, at 2 bytes an element.
    assert_eq!(half.memory().in_use_bytes - before, 2 * n);
    // An f32 op writing the same buffer gives it a block with room for f32.
    half.fill(&mut out, 0.5).unwrap();
    assert_eq!(out.storage(), Precision::Fp32);
    assert_eq!(half.memory().in_use_bytes - before, 4 * n);
}

#[test]
fn a_dnn_workspace_blocked_by_cached_blocks_gets_them_back_on_a_stand_in_device() {
    // x (1×16×16×8) and y are 8 KiB of f32, w and its DNN copy 2,304 bytes (4 KiB blocks);
    // the stand-in's workspace for this convolution is y's 8 KiB.
    let p = Conv2dParams {
        batch: 1,
        in_h: 16,
        in_w: 16,
        in_c: 8,
        out_c: 8,
        kernel_h: 3,
        kernel_w: 3,
        stride: 1,
        padding: 1,
    };
    let cached = (1 << 20) + (8 << 10) + (4 << 10);
    let in_use = (8 << 10) + (4 << 10);
    // Room for everything but the workspace, unless the cache goes back.
    let device = StandInDevice::with_dnn(in_use + cached + (4 << 10));
    let backend = GpuBackend::new(device.clone());
    let x = backend.upload(&vec![1.0; p.input_len()]).unwrap();
    let w = backend.upload(&vec![1.0; p.weight_len()]).unwrap();
    // Blocks for y and the DNN weights, and a large one, all cached.
    for len in [1 << 18, p.output_len(), p.weight_len()] {
        drop(backend.upload(&vec![0.0; len]).unwrap());
    }
    assert_eq!(
        backend.memory().reserved_bytes - backend.memory().in_use_bytes,
        cached
    );
    let mut y = backend.alloc(p.output_len()).unwrap();
    backend.conv2d_forward(&p, &x, &w, &mut y).unwrap();
    // y and the DNN weights took their cached blocks; the large one went back.
    assert_eq!(
        device.frees(),
        1,
        "the cache went back to make room for the workspace"
    );
    assert_eq!(
        device.live_bytes(),
        backend.memory().reserved_bytes + (8 << 10),
        "the workspace is the runtime's, outside the allocator"
    );
}

#[test]
fn reading_a_buffer_no_op_wrote_is_an_error_not_a_device_fault_on_a_stand_in_device() {
    let backend = GpuBackend::new(StandInDevice::new(GIB));
    let never_written = backend.alloc(16).unwrap();
    let mut host = vec![0.0; 16];
    let err = backend.download(&never_written, &mut host).unwrap_err();
    assert!(
        matches!(&err, EngineError::InvalidParameter { .. })
            && err.to_string().contains("before any op wrote it"),
        "{err}"
    );
    let mut copy = backend.alloc(16).unwrap();
    let err = backend.copy(&never_written, &mut copy).unwrap_err();
    assert!(err.to_string().contains("before any op wrote it"), "{err}");
}
