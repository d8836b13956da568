//! Layer speed of the CPU backend on the main ResNet-50 shapes at batch 32 (or, with
//! `RESNET20`, every ResNet-20 shape at batch 128): convolution forward, backward-data and
//! backward-filter in GFLOP/s, and batch norm in GB/s.
//!
//! Run with `cargo bench --bench engine_layers` (optionally `-- QUICK` for batch 8, or
//! `-- RESNET20` for the CIFAR network, where the totals weigh each shape by how often a
//! training step runs it; add `GEMM` to run every convolution as an im2col GEMM).

use std::time::Instant;

use tinyperf::engine::backend::cpu::gemm::{matmul, MatMut, MatRef};
use tinyperf::engine::backend::{BatchNormBuffers, BatchNormGrads, BatchNormSaved};
use tinyperf::engine::{Backend, BatchNormParams, Conv2dParams, CpuBackend};

/// CPU time of every thread of this process so far, in seconds: on a shared machine the
/// work per CPU-second is a steadier figure than wall-clock rates.
fn process_cpu_seconds() -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .sum::<f64>()
        / 1e9
}

/// Median wall seconds and median CPU seconds of `repeats` runs after one warm-up.
fn median_seconds(repeats: usize, mut f: impl FnMut()) -> (f64, f64) {
    f();
    let mut wall = Vec::with_capacity(repeats);
    let mut cpu = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let c = process_cpu_seconds();
        let t = Instant::now();
        f();
        wall.push(t.elapsed().as_secs_f64());
        cpu.push(process_cpu_seconds() - c);
    }
    wall.sort_by(f64::total_cmp);
    cpu.sort_by(f64::total_cmp);
    (wall[repeats / 2], cpu[repeats / 2])
}

fn filled(
    backend: &CpuBackend,
    len: usize,
    seed: usize,
) -> tinyperf::engine::backend::cpu::CpuBuffer {
    let host: Vec<f32> = (0..len)
        .map(|i| ((i * 7919 + seed * 104_729) % 2001) as f32 / 1000.0 - 1.0)
        .collect();
    backend.upload(&host).expect("upload")
}

struct Case {
    name: &'static str,
    p: Conv2dParams,
    data_grad: bool,
    /// How many convolutions of this shape one training step runs.
    count: usize,
}

fn conv(batch: usize, hw: usize, cin: usize, cout: usize, k: usize, stride: usize) -> Conv2dParams {
    Conv2dParams {
        batch,
        in_h: hw,
        in_w: hw,
        in_c: cin,
        out_c: cout,
        kernel_h: k,
        kernel_w: k,
        stride,
        padding: k / 2,
    }
}

fn case(name: &'static str, p: Conv2dParams, data_grad: bool, count: usize) -> Case {
    Case {
        name,
        p,
        data_grad,
        count,
    }
}

fn resnet50_cases(batch: usize) -> Vec<Case> {
    vec![
        case(
            "stem 224x224x3->64 7x7/2",
            conv(batch, 224, 3, 64, 7, 2),
            false,
            1,
        ),
        case("56x56x64->64 3x3", conv(batch, 56, 64, 64, 3, 1), true, 3),
        case("56x56x64->256 1x1", conv(batch, 56, 64, 256, 1, 1), true, 4),
        case("56x56x256->64 1x1", conv(batch, 56, 256, 64, 1, 1), true, 2),
        case(
            "56x56x256->512 1x1/2",
            conv(batch, 56, 256, 512, 1, 2),
            true,
            1,
        ),
        case(
            "28x28x128->128 3x3",
            conv(batch, 28, 128, 128, 3, 1),
            true,
            3,
        ),
        case(
            "14x14x256->256 3x3",
            conv(batch, 14, 256, 256, 3, 1),
            true,
            5,
        ),
        case("7x7x512->512 3x3", conv(batch, 7, 512, 512, 3, 1), true, 2),
    ]
}

/// Every convolution of ResNet-20 (option-B shortcuts) with its count per step.
fn resnet20_cases(batch: usize) -> Vec<Case> {
    vec![
        case(
            "stem 32x32x3->16 3x3",
            conv(batch, 32, 3, 16, 3, 1),
            false,
            1,
        ),
        case("32x32x16->16 3x3", conv(batch, 32, 16, 16, 3, 1), true, 6),
        case("32x32x16->32 3x3/2", conv(batch, 32, 16, 32, 3, 2), true, 1),
        case("32x32x16->32 1x1/2", conv(batch, 32, 16, 32, 1, 2), true, 1),
        case("16x16x32->32 3x3", conv(batch, 16, 32, 32, 3, 1), true, 5),
        case("16x16x32->64 3x3/2", conv(batch, 16, 32, 64, 3, 2), true, 1),
        case("16x16x32->64 1x1/2", conv(batch, 16, 32, 64, 1, 2), true, 1),
        case("8x8x64->64 3x3", conv(batch, 8, 64, 64, 3, 1), true, 5),
    ]
}

fn main() {
    let quick = std::env::args().any(|a| a == "QUICK");
    let resnet20 = std::env::args().any(|a| a == "RESNET20");
    let batch = match (resnet20, quick) {
        (true, true) => 32,
        (true, false) => 128,
        (false, true) => 8,
        (false, false) => 32,
    };
    let repeats = if quick { 3 } else { 5 };
    let backend = if std::env::args().any(|a| a == "GEMM") {
        CpuBackend::with_gemm_convolutions()
    } else {
        CpuBackend::new()
    };
    println!(
        "engine layer bench: batch {batch}, {} threads, median of {repeats}",
        backend.threads()
    );
    // The machine may be shared: a plain GEMM measured now is the yardstick for the rest.
    let n = 1024;
    let a = vec![0.5f32; n * n];
    let bm = vec![0.25f32; n * n];
    let mut c = vec![0.0f32; n * n];
    let reference = median_seconds(repeats, || {
        matmul(
            MatMut::row_major(&mut c, n, n),
            MatRef::row_major(&a, n, n),
            MatRef::row_major(&bm, n, n),
            false,
            backend.threads(),
        )
    });
    let reference_gflops = 2.0 * (n as f64).powi(3) / reference.0 / 1e9;
    println!(
        "reference {n}³ GEMM on {} threads: {reference_gflops:.1} GFLOP/s wall, {:.1} GFLOP per CPU-second",
        backend.threads(),
        2.0 * (n as f64).powi(3) / reference.1 / 1e9
    );
    let cases = if resnet20 {
        resnet20_cases(batch)
    } else {
        resnet50_cases(batch)
    };
    let mut step_conv_seconds = 0.0;
    println!(
        "{:<28} {:>9} {:>9} {:>9} {:>9}",
        "conv", "fwd", "bwd-data", "bwd-filt", "ms total"
    );
    for case in &cases {
        let p = case.p;
        let x = filled(&backend, p.input_len(), 1);
        let w = filled(&backend, p.weight_len(), 2);
        let dy = filled(&backend, p.output_len(), 3);
        let mut y = backend.zeros(p.output_len()).expect("alloc");
        let mut dx = backend.zeros(p.input_len()).expect("alloc");
        let mut dw = backend.zeros(p.weight_len()).expect("alloc");
        let flops = p.forward_flops();
        let fwd = median_seconds(repeats, || {
            backend.conv2d_forward(&p, &x, &w, &mut y).expect("fwd")
        });
        let bwd_data = if case.data_grad {
            median_seconds(repeats, || {
                backend
                    .conv2d_backward_data(&p, &dy, &w, &mut dx)
                    .expect("bwd data")
            })
        } else {
            (0.0, 0.0)
        };
        let bwd_filter = median_seconds(repeats, || {
            backend
                .conv2d_backward_filter(&p, &x, &dy, &mut dw)
                .expect("bwd filter")
        });
        let rate = |s: f64| {
            if s > 0.0 {
                format!("{:.1}", flops / s / 1e9)
            } else {
                "-".into()
            }
        };
        step_conv_seconds += case.count as f64 * (fwd.0 + bwd_data.0 + bwd_filter.0);
        println!(
            "{:<28} {:>9} {:>9} {:>9} {:>9.1}   per CPU-second: {:>6} {:>6} {:>6}",
            case.name,
            rate(fwd.0),
            rate(bwd_data.0),
            rate(bwd_filter.0),
            (fwd.0 + bwd_data.0 + bwd_filter.0) * 1e3,
            rate(fwd.1),
            rate(bwd_data.1),
            rate(bwd_filter.1),
        );
    }
    println!("(GFLOP/s per pass; the reference GEMM reached {reference_gflops:.1})");
    println!(
        "convolutions of one training step: {:.1} ms",
        step_conv_seconds * 1e3
    );
    let bn_shapes: Vec<(usize, usize, usize)> = if resnet20 {
        // (rows, channels, batch norms of this shape per step)
        vec![
            (batch * 32 * 32, 16, 7),
            (batch * 16 * 16, 32, 7),
            (batch * 8 * 8, 64, 7),
        ]
    } else {
        vec![(batch * 56 * 56, 256, 1)]
    };
    let mut step_bn_seconds = 0.0;
    for (rows, channels, count) in bn_shapes {
        step_bn_seconds += count as f64 * batch_norm_case(&backend, repeats, rows, channels);
    }
    println!(
        "batch norm and ReLU of one training step: {:.1} ms",
        step_bn_seconds * 1e3
    );
}

/// Prints and returns the seconds of one batch-norm forward, backward, ReLU forward and
/// ReLU backward on `[rows, channels]`.
fn batch_norm_case(backend: &CpuBackend, repeats: usize, rows: usize, channels: usize) -> f64 {
    let p = BatchNormParams {
        rows,
        channels,
        eps: 1e-5,
        momentum: 0.1,
    };
    let x = filled(backend, rows * channels, 4);
    let dy = filled(backend, rows * channels, 5);
    let mut d = filled(backend, rows * channels, 7);
    let mut y = backend.zeros(rows * channels).expect("alloc");
    let mut dx = backend.zeros(rows * channels).expect("alloc");
    let zeros = |n| backend.zeros(n).expect("alloc");
    let mut bn = BatchNormBuffers {
        gamma: filled(backend, channels, 6),
        beta: zeros(channels),
        running_mean: zeros(channels),
        running_var: zeros(channels),
    };
    let mut saved = BatchNormSaved {
        mean: zeros(channels),
        inv_std: zeros(channels),
    };
    let mut grads = BatchNormGrads {
        gamma: zeros(channels),
        beta: zeros(channels),
    };
    let bytes = (rows * channels * 4) as f64;
    let fwd = median_seconds(repeats, || {
        backend
            .batch_norm_forward_train(&p, &x, &mut bn, &mut saved, &mut y)
            .expect("bn fwd")
    });
    let bwd = median_seconds(repeats, || {
        backend
            .batch_norm_backward(&p, &x, &dy, &bn.gamma, &saved, &mut dx, &mut grads)
            .expect("bn bwd")
    });
    let relu = median_seconds(repeats, || backend.relu_forward(&mut y).expect("relu"));
    let relu_bwd = median_seconds(repeats, || {
        backend.relu_backward(&y, &mut d).expect("relu backward")
    });
    println!(
        "batch norm {rows}x{channels}: forward {:.2} ms ({:.1} GB/s), backward {:.2} ms ({:.1} GB/s); relu {:.2} ms, relu backward {:.2} ms",
        fwd.0 * 1e3,
        3.0 * bytes / fwd.0 / 1e9,
        bwd.0 * 1e3,
        5.0 * bytes / bwd.0 / 1e9,
        relu.0 * 1e3,
        relu_bwd.0 * 1e3
    );
    fwd.0 + bwd.0 + relu.0 + relu_bwd.0
}
