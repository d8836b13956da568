//! The CPU ops against direct loop implementations in f64.

use super::*;
use crate::engine::gradcheck::{assert_values_close, uniform};

#[allow(clippy::too_many_arguments)]
fn conv(
    n: usize,
    h: usize,
    w: usize,
    cin: usize,
    cout: usize,
    k: usize,
    s: usize,
    pad: usize,
) -> Conv2dParams {
    Conv2dParams {
        batch: n,
        in_h: h,
        in_w: w,
        in_c: cin,
        out_c: cout,
        kernel_h: k,
        kernel_w: k,
        stride: s,
        padding: pad,
    }
}

/// 1×1, 3×3 and 7×7 kernels, strides 1 and 2, padding, odd sizes, batch > 1.
pub fn conv_cases() -> Vec<Conv2dParams> {
    vec![
        conv(2, 5, 6, 3, 4, 3, 1, 1),
        conv(2, 7, 7, 2, 3, 3, 2, 1),
        conv(2, 4, 5, 3, 5, 1, 1, 0),
        conv(3, 5, 5, 4, 2, 1, 2, 0),
        conv(2, 9, 11, 3, 2, 7, 2, 3),
        conv(1, 6, 4, 2, 3, 3, 1, 0),
    ]
}

/// Input index of (n, ih, iw) for output (oh, ow) and tap (kh, kw), if inside the image.
fn tap(p: &Conv2dParams, oh: usize, ow: usize, kh: usize, kw: usize) -> Option<(usize, usize)> {
    let ih = (oh * p.stride + kh) as isize - p.padding as isize;
    let iw = (ow * p.stride + kw) as isize - p.padding as isize;
    (ih >= 0 && iw >= 0 && (ih as usize) < p.in_h && (iw as usize) < p.in_w)
        .then_some((ih as usize, iw as usize))
}

/// Visits every (x index, w index, y index) triple of the convolution.
fn for_each_tap(p: &Conv2dParams, mut f: impl FnMut(usize, usize, usize)) {
    let (oh_n, ow_n) = (p.out_h(), p.out_w());
    for n in 0..p.batch {
        for oh in 0..oh_n {
            for ow in 0..ow_n {
                for kh in 0..p.kernel_h {
                    for kw in 0..p.kernel_w {
                        let Some((ih, iw)) = tap(p, oh, ow, kh, kw) else {
                            continue;
                        };
                        for ci in 0..p.in_c {
                            for co in 0..p.out_c {
                                let xi = ((n * p.in_h + ih) * p.in_w + iw) * p.in_c + ci;
                                let wi = ((kh * p.kernel_w + kw) * p.in_c + ci) * p.out_c + co;
                                let yi = ((n * oh_n + oh) * ow_n + ow) * p.out_c + co;
                                f(xi, wi, yi);
                            }
                        }
                    }
                }
            }
        }
    }
}

fn backends() -> Vec<(&'static str, CpuBackend)> {
    vec![
        ("auto tiles", CpuBackend::new()),
        ("5-row tiles", CpuBackend::with_conv_tile_rows(5)),
        ("1-row tiles", CpuBackend::with_conv_tile_rows(1)),
    ]
}

/// Runs the three convolution ops of every backend on `p` against f64 loops.
fn check_conv_against_loops(p: Conv2dParams, backends: &[(&str, CpuBackend)]) {
    let x = uniform(p.input_len(), 1, -1.0, 1.0);
    let w = uniform(p.weight_len(), 2, -1.0, 1.0);
    let dy = uniform(p.output_len(), 3, -1.0, 1.0);
    let mut y_ref = vec![0.0f64; p.output_len()];
    let mut dx_ref = vec![0.0f64; p.input_len()];
    let mut dw_ref = vec![0.0f64; p.weight_len()];
    for_each_tap(&p, |xi, wi, yi| {
        y_ref[yi] += x[xi] as f64 * w[wi] as f64;
        dx_ref[xi] += dy[yi] as f64 * w[wi] as f64;
        dw_ref[wi] += dy[yi] as f64 * x[xi] as f64;
    });
    for (label, b) in backends {
        let name = format!("{p:?} with {label}");
        let (xb, wb, dyb) = (
            b.upload(&x).unwrap(),
            b.upload(&w).unwrap(),
            b.upload(&dy).unwrap(),
        );
        // Garbage in the outputs proves every op overwrites rather than accumulates.
        let mut y = b.upload(&vec![7.0; p.output_len()]).unwrap();
        let mut dx = b.upload(&vec![7.0; p.input_len()]).unwrap();
        let mut dw = b.upload(&vec![7.0; p.weight_len()]).unwrap();
        b.conv2d_forward(&p, &xb, &wb, &mut y).unwrap();
        b.conv2d_backward_data(&p, &dyb, &wb, &mut dx).unwrap();
        b.conv2d_backward_filter(&p, &xb, &dyb, &mut dw).unwrap();
        assert_values_close(&format!("forward {name}"), y.as_slice(), &y_ref, 1e-5, 1e-5);
        assert_values_close(
            &format!("backward data {name}"),
            dx.as_slice(),
            &dx_ref,
            1e-5,
            1e-5,
        );
        assert_values_close(
            &format!("backward filter {name}"),
            dw.as_slice(),
            &dw_ref,
            1e-5,
            1e-5,
        );
    }
}

#[test]
fn conv_forward_and_both_backwards_match_direct_loops() {
    for p in conv_cases() {
        check_conv_against_loops(p, &backends());
    }
}

/// Shapes of the direct kernels: 1 to 4 vectors of output channels, input channels that
/// are not multiples of 8, strides 1 and 2, no padding, 1×1 to 7×7 kernels, and rows
/// whose width leaves every tail block size (16 + 4 + 2 + 1 = 23).
fn narrow_conv_cases() -> Vec<Conv2dParams> {
    vec![
        conv(3, 7, 9, 16, 16, 3, 1, 1),
        conv(1, 5, 23, 16, 16, 3, 1, 1),
        conv(2, 9, 7, 13, 32, 3, 2, 1),
        conv(2, 8, 8, 3, 48, 3, 1, 1),
        conv(2, 6, 5, 32, 64, 1, 2, 0),
        conv(2, 5, 7, 48, 16, 3, 1, 0),
        conv(1, 11, 10, 16, 64, 5, 1, 2),
        conv(2, 9, 9, 20, 16, 7, 2, 3),
        conv(2, 6, 11, 64, 32, 3, 1, 1),
    ]
}

#[test]
fn direct_convolutions_match_direct_loops_and_the_gemm_path() {
    let avx512 = direct_conv::cpu_has_avx512();
    for p in narrow_conv_cases() {
        // On an AVX-512 CPU these shapes must really take the direct kernels.
        assert_eq!(direct_conv::supports_forward(&p), avx512, "{p:?}");
        assert_eq!(direct_conv::supports_filter(&p), avx512, "{p:?}");
        let data_direct = p.stride == 1 && p.in_c % 16 == 0 && p.in_c <= 64 && p.out_c <= 64;
        assert_eq!(
            direct_conv::supports_backward_data(&p),
            avx512 && data_direct,
            "{p:?}"
        );
        check_conv_against_loops(
            p,
            &[
                ("direct kernels", CpuBackend::with_direct_convolutions()),
                ("GEMM only", CpuBackend::with_gemm_convolutions()),
            ],
        );
    }
    // Wide layers stay GEMMs: more than 64 channels in or out, or (for the filter
    // gradient) an output image too large to reread from L2.
    assert!(!direct_conv::supports_forward(&conv(
        1, 8, 8, 128, 64, 3, 1, 1
    )));
    assert!(!direct_conv::supports_forward(&conv(
        1, 8, 8, 64, 128, 3, 1, 1
    )));
    assert!(!direct_conv::supports_backward_data(&conv(
        1, 8, 8, 64, 256, 1, 1, 0
    )));
    let stem = conv(1, 224, 224, 3, 64, 7, 2, 3);
    assert_eq!(direct_conv::supports_forward(&stem), avx512);
    assert!(!direct_conv::supports_filter(&stem));
}

#[test]
fn conv_rejects_wrong_buffer_lengths_and_impossible_shapes() {
    let b = CpuBackend::new();
    let p = conv(2, 5, 5, 3, 4, 3, 1, 1);
    let x = b.zeros(p.input_len()).unwrap();
    let w = b.zeros(p.weight_len() - 1).unwrap();
    let mut y = b.zeros(p.output_len()).unwrap();
    let err = b.conv2d_forward(&p, &x, &w, &mut y).unwrap_err();
    assert!(
        matches!(err, EngineError::BufferLength { what: "w", .. }),
        "{err}"
    );
    let too_big_kernel = conv(1, 2, 2, 1, 1, 7, 1, 0);
    assert!(b
        .conv2d_forward(
            &too_big_kernel,
            &b.zeros(4).unwrap(),
            &b.zeros(49).unwrap(),
            &mut b.zeros(1).unwrap()
        )
        .is_err());
}

fn bn_reference(x: &[f32], rows: usize, c: usize) -> (Vec<f64>, Vec<f64>) {
    let mut mean = vec![0.0; c];
    let mut var = vec![0.0; c];
    for r in 0..rows {
        for k in 0..c {
            mean[k] += x[r * c + k] as f64 / rows as f64;
        }
    }
    for r in 0..rows {
        for k in 0..c {
            var[k] += (x[r * c + k] as f64 - mean[k]).powi(2) / rows as f64;
        }
    }
    (mean, var)
}

/// Batch norm over `rows` rows with eps 1e-5 and momentum 0.1, its buffers uploaded from
/// `[gamma, beta, running mean, running var]` (one value a channel) and zeroed saved
/// statistics.
fn bn_state(
    b: &CpuBackend,
    rows: usize,
    [gamma, beta, running_mean, running_var]: [&[f32]; 4],
) -> (
    BatchNormParams,
    BatchNormBuffers<CpuBuffer>,
    BatchNormSaved<CpuBuffer>,
) {
    let c = gamma.len();
    let p = BatchNormParams {
        rows,
        channels: c,
        eps: 1e-5,
        momentum: 0.1,
    };
    let bn = BatchNormBuffers {
        gamma: b.upload(gamma).unwrap(),
        beta: b.upload(beta).unwrap(),
        running_mean: b.upload(running_mean).unwrap(),
        running_var: b.upload(running_var).unwrap(),
    };
    let saved = BatchNormSaved {
        mean: b.zeros(c).unwrap(),
        inv_std: b.zeros(c).unwrap(),
    };
    (p, bn, saved)
}

#[test]
fn batch_norm_training_normalises_and_updates_running_stats_like_pytorch() {
    let b = CpuBackend::new();
    // Enough rows for several parallel chunks, with an offset mean to test the variance.
    let (rows, c) = (1300, 3);
    let x = uniform(rows * c, 4, 2.0, 5.0);
    let gamma = [0.5f32, 1.0, 2.0];
    let beta = [0.0f32, -1.0, 0.25];
    let running = ([1.0, 0.0, -1.0], [1.0, 2.0, 3.0]);
    let (p, mut bn, mut saved) = bn_state(&b, rows, [&gamma, &beta, &running.0, &running.1]);
    let mut y = b.zeros(rows * c).unwrap();
    b.batch_norm_forward_train(&p, &b.upload(&x).unwrap(), &mut bn, &mut saved, &mut y)
        .unwrap();

    let (mean, var) = bn_reference(&x, rows, c);
    let y_ref: Vec<f64> = (0..rows * c)
        .map(|i| {
            let k = i % c;
            (x[i] as f64 - mean[k]) / (var[k] + 1e-5).sqrt() * gamma[k] as f64 + beta[k] as f64
        })
        .collect();
    assert_values_close("bn train y", y.as_slice(), &y_ref, 1e-5, 1e-5);
    let unbiased: Vec<f64> = var
        .iter()
        .map(|v| v * rows as f64 / (rows as f64 - 1.0))
        .collect();
    let rm_ref: Vec<f64> = [1.0, 0.0, -1.0]
        .iter()
        .zip(&mean)
        .map(|(r, m)| 0.9 * r + 0.1 * m)
        .collect();
    let rv_ref: Vec<f64> = [1.0, 2.0, 3.0]
        .iter()
        .zip(&unbiased)
        .map(|(r, v)| 0.9 * r + 0.1 * v)
        .collect();
    assert_values_close(
        "running mean",
        bn.running_mean.as_slice(),
        &rm_ref,
        1e-6,
        1e-6,
    );
    assert_values_close(
        "running var",
        bn.running_var.as_slice(),
        &rv_ref,
        1e-6,
        1e-6,
    );

    // Eval mode normalises with the running statistics and leaves them alone.
    let mut y_eval = b.zeros(rows * c).unwrap();
    b.batch_norm_forward_eval(&p, &b.upload(&x).unwrap(), &bn, &mut y_eval)
        .unwrap();
    let eval_ref: Vec<f64> = (0..rows * c)
        .map(|i| {
            let k = i % c;
            (x[i] as f64 - rm_ref[k]) / (rv_ref[k] + 1e-5).sqrt() * gamma[k] as f64 + beta[k] as f64
        })
        .collect();
    assert_values_close("bn eval y", y_eval.as_slice(), &eval_ref, 1e-5, 1e-5);
    assert_values_close(
        "running mean unchanged",
        bn.running_mean.as_slice(),
        &rm_ref,
        1e-6,
        1e-6,
    );
}

/// Channel counts of whole 16-lane vectors take the AVX-512 loops where the CPU has
/// them: an odd row count leaves a partial chunk and a partial f32 block.
#[test]
fn batch_norm_on_whole_vectors_of_channels_matches_f64_formulas() {
    let b = CpuBackend::new();
    for c in [16, 48] {
        let rows = 1301;
        let x = uniform(rows * c, 11, 2.0, 5.0);
        let dy = uniform(rows * c, 12, -1.0, 1.0);
        let gamma = uniform(c, 13, 0.5, 2.0);
        let beta = uniform(c, 14, -1.0, 1.0);
        let (p, mut bn, mut saved) =
            bn_state(&b, rows, [&gamma, &beta, &vec![0.0; c], &vec![1.0; c]]);
        let xb = b.upload(&x).unwrap();
        let mut y = b.upload(&vec![7.0; rows * c]).unwrap();
        b.batch_norm_forward_train(&p, &xb, &mut bn, &mut saved, &mut y)
            .unwrap();
        let (mean, var) = bn_reference(&x, rows, c);
        let inv_std: Vec<f64> = var.iter().map(|v| 1.0 / (v + 1e-5).sqrt()).collect();
        let xhat = |i: usize| (x[i] as f64 - mean[i % c]) * inv_std[i % c];
        let y_ref: Vec<f64> = (0..rows * c)
            .map(|i| xhat(i) * gamma[i % c] as f64 + beta[i % c] as f64)
            .collect();
        assert_values_close(
            &format!("y, {c} channels"),
            y.as_slice(),
            &y_ref,
            1e-5,
            1e-5,
        );
        assert_values_close("saved mean", saved.mean.as_slice(), &mean, 1e-6, 1e-6);
        assert_values_close(
            "saved inv_std",
            saved.inv_std.as_slice(),
            &inv_std,
            1e-5,
            1e-5,
        );

        let mut dbeta = vec![0.0f64; c];
        let mut dgamma = vec![0.0f64; c];
        for i in 0..rows * c {
            dbeta[i % c] += dy[i] as f64;
            dgamma[i % c] += dy[i] as f64 * xhat(i);
        }
        let dx_ref: Vec<f64> = (0..rows * c)
            .map(|i| {
                let k = i % c;
                gamma[k] as f64
                    * inv_std[k]
                    * (dy[i] as f64 - dbeta[k] / rows as f64 - xhat(i) * dgamma[k] / rows as f64)
            })
            .collect();
        let mut dx = b.upload(&vec![7.0; rows * c]).unwrap();
        let mut grads = BatchNormGrads {
            gamma: b.upload(&vec![7.0; c]).unwrap(),
            beta: b.upload(&vec![7.0; c]).unwrap(),
        };
        b.batch_norm_backward(
            &p,
            &xb,
            &b.upload(&dy).unwrap(),
            &bn.gamma,
            &saved,
            &mut dx,
            &mut grads,
        )
        .unwrap();
        assert_values_close(
            &format!("dx, {c} channels"),
            dx.as_slice(),
            &dx_ref,
            1e-4,
            1e-5,
        );
        assert_values_close("dgamma", grads.gamma.as_slice(), &dgamma, 1e-5, 1e-5);
        assert_values_close("dbeta", grads.beta.as_slice(), &dbeta, 1e-5, 1e-5);
    }
}

#[test]
fn max_pool_and_global_average_pool_match_direct_loops() {
    let b = CpuBackend::new();
    let p = PoolParams {
        batch: 2,
        in_h: 7,
        in_w: 6,
        channels: 3,
        kernel: 3,
        stride: 2,
        padding: 1,
    };
    let x = uniform(p.input_len(), 5, -1.0, 1.0);
    let mut y = b.zeros(p.output_len()).unwrap();
    b.max_pool_forward(&p, &b.upload(&x).unwrap(), &mut y)
        .unwrap();
    let mut y_ref = vec![f64::NEG_INFINITY; p.output_len()];
    for n in 0..2 {
        for oh in 0..p.out_h() {
            for ow in 0..p.out_w() {
                for kh in 0..3 {
                    for kw in 0..3 {
                        let ih = (oh * 2 + kh) as isize - 1;
                        let iw = (ow * 2 + kw) as isize - 1;
                        if ih < 0 || iw < 0 || ih >= 7 || iw >= 6 {
                            continue;
                        }
                        for c in 0..3 {
                            let v = x[((n * 7 + ih as usize) * 6 + iw as usize) * 3 + c] as f64;
                            let o = &mut y_ref[((n * p.out_h() + oh) * p.out_w() + ow) * 3 + c];
                            *o = o.max(v);
                        }
                    }
                }
            }
        }
    }
    assert_eq!((p.out_h(), p.out_w()), (4, 3));
    assert_values_close("max pool", y.as_slice(), &y_ref, 0.0, 0.0);

    let g = GlobalPoolParams {
        batch: 2,
        spatial: 42,
        channels: 3,
    };
    let mut avg = b.zeros(6).unwrap();
    b.global_avg_pool_forward(&g, &b.upload(&x).unwrap(), &mut avg)
        .unwrap();
    let avg_ref: Vec<f64> = (0..6)
        .map(|i| {
            (0..42)
                .map(|s| x[((i / 3) * 42 + s) * 3 + i % 3] as f64)
                .sum::<f64>()
                / 42.0
        })
        .collect();
    assert_values_close("global average", avg.as_slice(), &avg_ref, 1e-6, 1e-6);
}

#[test]
fn cross_entropy_matches_the_pytorch_formula_and_skips_padded_samples() {
    let b = CpuBackend::new();
    let (batch, classes, eps) = (4, 5, 0.1f32);
    let mut logits = uniform(batch * classes, 6, -3.0, 3.0);
    // Sample 0 is predicted right, so the correctness check can fail both ways.
    logits[2] = 10.0;
    let labels = [2.0f32, 0.0, -1.0, 4.0];
    let p = CrossEntropyParams {
        batch,
        classes,
        label_smoothing: eps,
    };
    let mut loss = b.zeros(1).unwrap();
    let mut correct = b.upload(&[9.0; 4]).unwrap();
    b.cross_entropy_forward(
        &p,
        &b.upload(&logits).unwrap(),
        &b.upload(&labels).unwrap(),
        &mut loss,
        &mut correct,
    )
    .unwrap();
    let mut total = 0.0;
    let mut hits = vec![0.0; batch];
    for i in [0usize, 1, 3] {
        let z: Vec<f64> = logits[i * classes..(i + 1) * classes]
            .iter()
            .map(|&v| v as f64)
            .collect();
        let lse = z.iter().map(|v| v.exp()).sum::<f64>().ln();
        let logp: Vec<f64> = z.iter().map(|v| v - lse).collect();
        let y = labels[i] as usize;
        total +=
            (1.0 - eps as f64) * -logp[y] + eps as f64 * -logp.iter().sum::<f64>() / classes as f64;
        let argmax = (0..classes).fold(0, |best, k| if z[k] > z[best] { k } else { best });
        hits[i] = if argmax == y { 1.0 } else { 0.0 };
    }
    assert_values_close("loss", loss.as_slice(), &[total / 3.0], 1e-6, 1e-6);
    assert_eq!(hits[0], 1.0);
    assert_values_close("correct", correct.as_slice(), &hits, 0.0, 0.0);

    // Uniform logits: every smoothing gives ln K.
    let p0 = CrossEntropyParams {
        batch: 1,
        classes: 7,
        label_smoothing: 0.3,
    };
    let mut one = b.zeros(1).unwrap();
    b.cross_entropy_forward(
        &p0,
        &b.zeros(7).unwrap(),
        &b.upload(&[3.0]).unwrap(),
        &mut one,
        &mut b.zeros(1).unwrap(),
    )
    .unwrap();
    assert!((one.as_slice()[0] as f64 - 7f64.ln()).abs() < 1e-6);

    let bad = b.upload(&[2.0, 5.0, 0.0, 1.0]).unwrap();
    let err = b
        .cross_entropy_forward(
            &p,
            &b.upload(&logits).unwrap(),
            &bad,
            &mut loss,
            &mut correct,
        )
        .unwrap_err();
    assert!(err.to_string().contains("label 5"), "{err}");
    let all_padded = b.upload(&[-1.0; 4]).unwrap();
    assert!(b
        .cross_entropy_forward(
            &p,
            &b.upload(&logits).unwrap(),
            &all_padded,
            &mut loss,
            &mut correct
        )
        .is_err());
}

#[test]
fn reductions_and_elementwise_ops() {
    let b = CpuBackend::new();
    let x = uniform(40_000, 7, -1.0, 1.0);
    let xb = b.upload(&x).unwrap();
    let mut out = b.zeros(3).unwrap();
    b.sum_squares(&xb, &mut out, 1).unwrap();
    let expected: f64 = x.iter().map(|&v| v as f64 * v as f64).sum();
    assert_values_close(
        "sum of squares",
        &out.as_slice()[1..2],
        &[expected],
        1e-6,
        0.0,
    );
    assert!(b.sum_squares(&xb, &mut out, 3).is_err());

    let mut y = b.upload(&vec![1.0; 40_000]).unwrap();
    b.axpy(-2.0, &xb, &mut y).unwrap();
    b.scale(&mut y, 0.5).unwrap();
    let mut sum = b.zeros(40_000).unwrap();
    b.add(&y, &xb, &mut sum).unwrap();
    // 0.5·(1 − 2x) + x = 0.5
    assert!(sum.as_slice().iter().all(|&v| (v - 0.5).abs() < 1e-6));

    assert!(!b.has_non_finite(&xb).unwrap());
    let mut bad = x.clone();
    bad[39_999] = f32::NAN;
    assert!(b.has_non_finite(&b.upload(&bad).unwrap()).unwrap());
    bad[39_999] = f32::INFINITY;
    assert!(b.has_non_finite(&b.upload(&bad).unwrap()).unwrap());

    let mut host = vec![0.0; 3];
    assert!(matches!(
        b.download(&xb, &mut host),
        Err(EngineError::BufferLength { .. })
    ));
}
