//! Layer speed of the CPU backend on the main ResNet-50 shapes at batch 32: convolution
//! forward, backward-data and backward-filter in GFLOP/s, and batch norm in GB/s.
//!
//! Run with `cargo bench --bench engine_layers` (optionally `-- QUICK` for batch 8).

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

fn main() {
    let quick = std::env::args().any(|a| a == "QUICK");
    let batch = if quick { 8 } else { 32 };
    let repeats = if quick { 3 } else { 5 };
    let backend = CpuBackend::new();
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
    let cases = [
        Case {
            name: "stem 224x224x3->64 7x7/2",
            p: conv(batch, 224, 3, 64, 7, 2),
            data_grad: false,
        },
        Case {
            name: "56x56x64->64 3x3",
            p: conv(batch, 56, 64, 64, 3, 1),
            data_grad: true,
        },
        Case {
            name: "56x56x64->256 1x1",
            p: conv(batch, 56, 64, 256, 1, 1),
            data_grad: true,
        },
        Case {
            name: "56x56x256->64 1x1",
            p: conv(batch, 56, 256, 64, 1, 1),
            data_grad: true,
        },
        Case {
            name: "56x56x256->512 1x1/2",
            p: conv(batch, 56, 256, 512, 1, 2),
            data_grad: true,
        },
        Case {
            name: "28x28x128->128 3x3",
            p: conv(batch, 28, 128, 128, 3, 1),
            data_grad: true,
        },
        Case {
            name: "14x14x256->256 3x3",
            p: conv(batch, 14, 256, 256, 3, 1),
            data_grad: true,
        },
        Case {
            name: "7x7x512->512 3x3",
            p: conv(batch, 7, 512, 512, 3, 1),
            data_grad: true,
        },
    ];
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

    let (rows, channels) = (batch * 56 * 56, 256);
    let p = BatchNormParams {
        rows,
        channels,
        eps: 1e-5,
        momentum: 0.1,
    };
    let x = filled(&backend, rows * channels, 4);
    let dy = filled(&backend, rows * channels, 5);
    let mut y = backend.zeros(rows * channels).expect("alloc");
    let mut dx = backend.zeros(rows * channels).expect("alloc");
    let zeros = |n| backend.zeros(n).expect("alloc");
    let mut bn = BatchNormBuffers {
        gamma: filled(&backend, channels, 6),
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
    println!(
        "batch norm {batch}x56x56x256: forward {:.1} ms ({:.1} GB/s), backward {:.1} ms ({:.1} GB/s); relu {:.1} ms",
        fwd.0 * 1e3,
        3.0 * bytes / fwd.0 / 1e9,
        bwd.0 * 1e3,
        5.0 * bytes / bwd.0 / 1e9,
        relu.0 * 1e3
    );
}
