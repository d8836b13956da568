//! Every layer's backward against central finite differences of the scalar loss
//! `L = Σ y·r` (r fixed and random, so dL/dy = r), on tiny shapes.
//!
//! The checks run in f32 with f64 loss accumulation. Tolerances: linear layers (conv,
//! linear, pools) are exact up to rounding, so the bound is 1e-2 of the largest gradient
//! with steps of 1e-2; batch norm and softmax add O(h²) truncation error, bounded the
//! same way with steps of 1e-3..1e-2.

use super::*;
use crate::engine::backend::cpu::tests::conv_cases;
use crate::engine::backend::cpu::CpuBackend;
use crate::engine::gradcheck::{
    assert_grad_close, away_from_zero, numeric_grad, uniform, weighted_sum,
};
use crate::engine::tensor::Tensor;
use crate::engine::EngineError;

type T = Tensor<CpuBackend>;

fn t(b: &CpuBackend, shape: &[usize], values: &[f32]) -> T {
    Tensor::from_host(b, shape, values).unwrap()
}

#[test]
fn conv2d_gradients_match_finite_differences() {
    for backend in [CpuBackend::new(), CpuBackend::with_conv_tile_rows(5)] {
        let b = &backend;
        for p in conv_cases() {
            let name = format!("{p:?}");
            let x_shape = [p.batch, p.in_h, p.in_w, p.in_c];
            let x = uniform(p.input_len(), 11, -1.0, 1.0);
            let w_oihw = uniform(p.weight_len(), 12, -1.0, 1.0);
            let r = uniform(p.output_len(), 13, -1.0, 1.0);
            let mut layer =
                Conv2d::new(b, p.in_c, p.out_c, p.kernel_h, p.stride, p.padding).unwrap();
            layer.set_weight_oihw(b, &w_oihw).unwrap();

            let xt = t(b, &x_shape, &x);
            let y = layer.forward(b, &xt).unwrap();
            assert_eq!(y.shape(), &[p.batch, p.out_h(), p.out_w(), p.out_c]);
            let dy = t(b, y.shape(), &r);
            let dx = layer
                .backward(b, &xt, &dy)
                .unwrap()
                .unwrap()
                .to_host(b)
                .unwrap();
            let dw_oihw = layer.weight_grad_oihw(b).unwrap();

            let loss_of_x = |xv: &[f32]| {
                weighted_sum(
                    &layer
                        .forward(b, &t(b, &x_shape, xv))
                        .unwrap()
                        .to_host(b)
                        .unwrap(),
                    &r,
                )
            };
            let num_dx = numeric_grad(&x, 1e-2, loss_of_x);
            assert_grad_close(&format!("conv dx {name}"), &dx, &num_dx, 1e-2, 1e-4);

            let mut probe =
                Conv2d::new(b, p.in_c, p.out_c, p.kernel_h, p.stride, p.padding).unwrap();
            let num_dw = numeric_grad(&w_oihw, 1e-2, |wv| {
                probe.set_weight_oihw(b, wv).unwrap();
                weighted_sum(&probe.forward(b, &xt).unwrap().to_host(b).unwrap(), &r)
            });
            assert_grad_close(&format!("conv dw {name}"), &dw_oihw, &num_dw, 1e-2, 1e-4);
        }
    }
}

#[test]
fn conv2d_weight_layout_round_trips_and_skips_input_grad_when_asked() {
    let b = &CpuBackend::new();
    let shape = ConvWeightShape {
        out_c: 3,
        in_c: 2,
        kernel_h: 3,
        kernel_w: 1,
    };
    let oihw: Vec<f32> = (0..shape.len()).map(|i| i as f32).collect();
    let hwio = conv_weight_from_oihw(&oihw, shape).unwrap();
    // OIHW (o=1, i=0, h=2, w=0) is element 1·6 + 0·3 + 2 = 8; HWIO puts it at (2·1 + 0)·2·3 + 0·3 + 1 = 13.
    assert_eq!(hwio[13], 8.0);
    assert_eq!(conv_weight_to_oihw(&hwio, shape).unwrap(), oihw);
    assert!(conv_weight_from_oihw(&oihw[1..], shape).is_err());

    let mut stem = Conv2d::new(b, 3, 4, 7, 2, 3).unwrap();
    stem.needs_input_grad = false;
    let x = t(b, &[1, 9, 9, 3], &uniform(243, 1, -1.0, 1.0));
    let y = stem.forward(b, &x).unwrap();
    assert_eq!(y.shape(), &[1, 5, 5, 4]);
    assert!(stem.backward(b, &x, &y).unwrap().is_none());
}

#[test]
fn layers_reject_mismatched_shapes_with_errors() {
    let b = &CpuBackend::new();
    let conv = Conv2d::new(b, 3, 4, 3, 1, 1).unwrap();
    let wrong_channels = T::zeros(b, &[1, 4, 4, 2]).unwrap();
    assert!(matches!(
        conv.forward(b, &wrong_channels),
        Err(EngineError::ShapeMismatch { .. })
    ));
    assert!(matches!(
        conv.forward(b, &T::zeros(b, &[4, 3]).unwrap()),
        Err(EngineError::ShapeMismatch { .. })
    ));
    assert!(Conv2d::new(b, 3, 4, 3, 1, 3).is_err());

    let mut bn = BatchNorm2d::new(b, 3).unwrap();
    let x = T::zeros(b, &[2, 2, 2, 3]).unwrap();
    assert!(matches!(
        bn.backward(b, &x, &x),
        Err(EngineError::MissingForwardState { .. })
    ));
    assert!(bn.forward(b, &wrong_channels).is_err());

    let linear = Linear::new(b, 5, 2).unwrap();
    assert!(linear.forward(b, &T::zeros(b, &[2, 4]).unwrap()).is_err());

    let xent = SoftmaxCrossEntropy {
        label_smoothing: 0.1,
    };
    let logits = T::zeros(b, &[2, 3]).unwrap();
    assert!(xent
        .forward(b, &logits, &T::zeros(b, &[3]).unwrap())
        .is_err());
    let bad_smoothing = SoftmaxCrossEntropy {
        label_smoothing: 1.5,
    };
    assert!(bad_smoothing
        .forward(b, &logits, &T::zeros(b, &[2]).unwrap())
        .is_err());

    assert!(ResidualAdd::forward(
        b,
        T::zeros(b, &[2, 3]).unwrap(),
        &T::zeros(b, &[3, 2]).unwrap()
    )
    .is_err());
    assert!(MaxPool2d {
        kernel: 3,
        stride: 2,
        padding: 2
    }
    .forward(b, &x)
    .is_err());
    assert!(T::from_host(b, &[2, 2], &[1.0; 3]).is_err());
}

#[test]
fn batch_norm_gradients_match_finite_differences() {
    let b = &CpuBackend::new();
    let shape = [2, 3, 3, 4];
    let n: usize = shape.iter().product();
    let x = uniform(n, 21, -1.0, 2.0);
    let r = uniform(n, 22, -1.0, 1.0);
    let gamma = uniform(4, 23, 0.5, 1.5);
    let beta = uniform(4, 24, -0.5, 0.5);
    let layer_with = |g: &[f32], be: &[f32]| {
        let mut layer = BatchNorm2d::new(b, 4).unwrap();
        layer.state.gamma = b.upload(g).unwrap();
        layer.state.beta = b.upload(be).unwrap();
        layer
    };
    let mut layer = layer_with(&gamma, &beta);
    let xt = t(b, &shape, &x);
    layer.forward(b, &xt).unwrap();
    let dx = layer
        .backward(b, &xt, &t(b, &shape, &r))
        .unwrap()
        .to_host(b)
        .unwrap();
    let loss = |xv: &[f32], g: &[f32], be: &[f32]| {
        let mut probe = layer_with(g, be);
        weighted_sum(
            &probe
                .forward(b, &t(b, &shape, xv))
                .unwrap()
                .to_host(b)
                .unwrap(),
            &r,
        )
    };
    assert_grad_close(
        "bn dx",
        &dx,
        &numeric_grad(&x, 1e-3, |xv| loss(xv, &gamma, &beta)),
        2e-2,
        1e-3,
    );
    assert_grad_close(
        "bn dgamma",
        layer.grads.gamma.as_slice(),
        &numeric_grad(&gamma, 1e-2, |g| loss(&x, g, &beta)),
        1e-2,
        1e-4,
    );
    assert_grad_close(
        "bn dbeta",
        layer.grads.beta.as_slice(),
        &numeric_grad(&beta, 1e-2, |be| loss(&x, &gamma, be)),
        1e-2,
        1e-4,
    );
}

#[test]
fn relu_max_pool_and_global_average_pool_gradients_match_finite_differences() {
    let b = &CpuBackend::new();
    let shape = [2, 7, 6, 3];
    let n: usize = shape.iter().product();
    // Values at least 0.05 from zero and, for the pool, distinct by 0.01 or more: no
    // finite-difference step of 1e-3 crosses a kink.
    let x = away_from_zero(n, 31, 0.05, 1.0);
    let r = uniform(n, 32, -1.0, 1.0);
    let y = Relu::forward(b, t(b, &shape, &x)).unwrap();
    let dx = Relu::backward(b, &y, t(b, &shape, &r))
        .unwrap()
        .to_host(b)
        .unwrap();
    let num = numeric_grad(&x, 1e-3, |xv| {
        weighted_sum(
            &Relu::forward(b, t(b, &shape, xv))
                .unwrap()
                .to_host(b)
                .unwrap(),
            &r,
        )
    });
    assert_grad_close("relu dx", &dx, &num, 1e-2, 1e-3);

    let mut distinct: Vec<f32> = (0..n).map(|i| (i as f32) * 0.01 - 1.0).collect();
    let order = uniform(n, 33, 0.0, 1.0);
    let mut idx: Vec<usize> = (0..n).collect();
    idx.sort_by(|&a, &c| order[a].total_cmp(&order[c]));
    distinct = idx.iter().map(|&i| distinct[i]).collect();
    let pool = MaxPool2d::RESNET_STEM;
    let xt = t(b, &shape, &distinct);
    let y = pool.forward(b, &xt).unwrap();
    assert_eq!(y.shape(), &[2, 4, 3, 3]);
    let rp = uniform(y.numel(), 34, -1.0, 1.0);
    let dx = pool
        .backward(b, &xt, &t(b, y.shape(), &rp))
        .unwrap()
        .to_host(b)
        .unwrap();
    let num = numeric_grad(&distinct, 1e-3, |xv| {
        weighted_sum(
            &pool
                .forward(b, &t(b, &shape, xv))
                .unwrap()
                .to_host(b)
                .unwrap(),
            &rp,
        )
    });
    assert_grad_close("max pool dx", &dx, &num, 1e-2, 1e-3);

    let y = GlobalAvgPool::forward(b, &t(b, &shape, &x)).unwrap();
    assert_eq!(y.shape(), &[2, 3]);
    let rg = uniform(6, 35, -1.0, 1.0);
    let dx = GlobalAvgPool::backward(b, shape, &t(b, &[2, 3], &rg))
        .unwrap()
        .to_host(b)
        .unwrap();
    let num = numeric_grad(&x, 1e-2, |xv| {
        weighted_sum(
            &GlobalAvgPool::forward(b, &t(b, &shape, xv))
                .unwrap()
                .to_host(b)
                .unwrap(),
            &rg,
        )
    });
    assert_grad_close("global avg pool dx", &dx, &num, 1e-2, 1e-4);
}

#[test]
fn linear_gradients_match_finite_differences() {
    let b = &CpuBackend::new();
    let (batch, fin, fout) = (3, 5, 4);
    let x = uniform(batch * fin, 41, -1.0, 1.0);
    let w = uniform(fout * fin, 42, -1.0, 1.0);
    let bias = uniform(fout, 43, -1.0, 1.0);
    let r = uniform(batch * fout, 44, -1.0, 1.0);
    let make = |wv: &[f32], bv: &[f32]| {
        let mut l = Linear::new(b, fin, fout).unwrap();
        l.weight = t(b, &[fout, fin], wv);
        l.bias = t(b, &[fout], bv);
        l
    };
    let mut layer = make(&w, &bias);
    let xt = t(b, &[batch, fin], &x);
    let y = layer.forward(b, &xt).unwrap().to_host(b).unwrap();
    let y_ref: Vec<f64> = (0..batch * fout)
        .map(|i| {
            let (s, o) = (i / fout, i % fout);
            bias[o] as f64
                + (0..fin)
                    .map(|k| x[s * fin + k] as f64 * w[o * fin + k] as f64)
                    .sum::<f64>()
        })
        .collect();
    crate::engine::gradcheck::assert_values_close("linear y", &y, &y_ref, 1e-5, 1e-5);
    let dx = layer
        .backward(b, &xt, &t(b, &[batch, fout], &r), true)
        .unwrap()
        .unwrap()
        .to_host(b)
        .unwrap();
    let loss = |xv: &[f32], wv: &[f32], bv: &[f32]| {
        weighted_sum(
            &make(wv, bv)
                .forward(b, &t(b, &[batch, fin], xv))
                .unwrap()
                .to_host(b)
                .unwrap(),
            &r,
        )
    };
    assert_grad_close(
        "linear dx",
        &dx,
        &numeric_grad(&x, 1e-2, |v| loss(v, &w, &bias)),
        1e-2,
        1e-4,
    );
    assert_grad_close(
        "linear dw",
        &layer.weight_grad.to_host(b).unwrap(),
        &numeric_grad(&w, 1e-2, |v| loss(&x, v, &bias)),
        1e-2,
        1e-4,
    );
    assert_grad_close(
        "linear db",
        &layer.bias_grad.to_host(b).unwrap(),
        &numeric_grad(&bias, 1e-2, |v| loss(&x, &w, v)),
        1e-2,
        1e-4,
    );
    assert!(layer
        .backward(b, &xt, &t(b, &[batch, fout], &r), false)
        .unwrap()
        .is_none());
}

#[test]
fn cross_entropy_gradient_matches_finite_differences_with_label_smoothing() {
    let b = &CpuBackend::new();
    let (batch, classes) = (4, 6);
    let logits = uniform(batch * classes, 51, -2.0, 2.0);
    let labels = t(b, &[batch], &[1.0, -1.0, 5.0, 0.0]);
    let xent = SoftmaxCrossEntropy {
        label_smoothing: 0.1,
    };
    let lt = t(b, &[batch, classes], &logits);
    let out = xent.forward(b, &lt, &labels).unwrap();
    assert_eq!(out.loss.shape(), &[1]);
    assert_eq!(out.correct.shape(), &[batch]);
    let grad = xent.backward(b, &lt, &labels).unwrap().to_host(b).unwrap();
    assert!(
        grad[classes..2 * classes].iter().all(|&g| g == 0.0),
        "padded sample has no gradient"
    );
    let num = numeric_grad(&logits, 1e-2, |z| {
        xent.forward(b, &t(b, &[batch, classes], z), &labels)
            .unwrap()
            .loss
            .to_host(b)
            .unwrap()[0] as f64
    });
    assert_grad_close("cross entropy dlogits", &grad, &num, 2e-2, 2e-4);
}

#[test]
fn residual_add_sums_branches_and_merges_gradients() {
    let b = &CpuBackend::new();
    let a = uniform(24, 61, -1.0, 1.0);
    let s = uniform(24, 62, -1.0, 1.0);
    let out = ResidualAdd::forward(b, t(b, &[1, 2, 3, 4], &a), &t(b, &[1, 2, 3, 4], &s)).unwrap();
    let host = out.to_host(b).unwrap();
    assert!(host
        .iter()
        .zip(a.iter().zip(&s))
        .all(|(o, (x, y))| *o == x + y));
    let merged = ResidualAdd::merge_grads(b, out, &t(b, &[1, 2, 3, 4], &s))
        .unwrap()
        .to_host(b)
        .unwrap();
    assert!(merged
        .iter()
        .zip(host.iter().zip(&s))
        .all(|(m, (h, y))| *m == h + y));
}

/// A miniature ResNet path (conv → BN → ReLU → max pool → bottleneck with projection
/// shortcut → global pool → linear → cross-entropy): the layers compose, and the input
/// and stem-weight gradients through all of them match finite differences.
#[test]
fn composed_network_gradient_matches_finite_differences() {
    let b = &CpuBackend::new();
    let x_shape = [2, 8, 8, 3];
    let x = uniform(x_shape.iter().product(), 71, -1.0, 1.0);
    let labels = t(b, &[2], &[2.0, 0.0]);
    let xent = SoftmaxCrossEntropy {
        label_smoothing: 0.1,
    };

    struct Net {
        stem: Conv2d<CpuBackend>,
        bn: BatchNorm2d<CpuBackend>,
        branch: Conv2d<CpuBackend>,
        branch_bn: BatchNorm2d<CpuBackend>,
        shortcut: Conv2d<CpuBackend>,
        fc: Linear<CpuBackend>,
    }
    let make = |stem_w: &[f32]| {
        let mut net = Net {
            stem: Conv2d::new(b, 3, 4, 3, 2, 1).unwrap(),
            bn: BatchNorm2d::new(b, 4).unwrap(),
            branch: Conv2d::new(b, 4, 5, 3, 2, 1).unwrap(),
            branch_bn: BatchNorm2d::new(b, 5).unwrap(),
            shortcut: Conv2d::new(b, 4, 5, 1, 2, 0).unwrap(),
            fc: Linear::new(b, 5, 3).unwrap(),
        };
        net.stem.set_weight_oihw(b, stem_w).unwrap();
        net.branch
            .set_weight_oihw(b, &uniform(180, 73, -0.5, 0.5))
            .unwrap();
        net.shortcut
            .set_weight_oihw(b, &uniform(20, 74, -0.5, 0.5))
            .unwrap();
        net.fc.weight = t(b, &[3, 5], &uniform(15, 75, -1.0, 1.0));
        net
    };
    let stem_w = uniform(108, 72, -0.5, 0.5);
    let pool = MaxPool2d::RESNET_STEM;

    let loss_and_grads = |net: &mut Net, xv: &[f32], backward: bool| {
        let x0 = t(b, &x_shape, xv);
        let a1 = net.stem.forward(b, &x0).unwrap();
        let a2 = Relu::forward(b, net.bn.forward(b, &a1).unwrap()).unwrap();
        let a3 = pool.forward(b, &a2).unwrap();
        let a4 = net.branch.forward(b, &a3).unwrap();
        let a5 = net.branch_bn.forward(b, &a4).unwrap();
        let sc = net.shortcut.forward(b, &a3).unwrap();
        let a6 = Relu::forward(b, ResidualAdd::forward(b, a5, &sc).unwrap()).unwrap();
        let a7 = GlobalAvgPool::forward(b, &a6).unwrap();
        let logits = net.fc.forward(b, &a7).unwrap();
        let loss = xent
            .forward(b, &logits, &labels)
            .unwrap()
            .loss
            .to_host(b)
            .unwrap()[0] as f64;
        if !backward {
            return (loss, vec![]);
        }
        let g_logits = xent.backward(b, &logits, &labels).unwrap();
        let g7 = net.fc.backward(b, &a7, &g_logits, true).unwrap().unwrap();
        let g6 = Relu::backward(
            b,
            &a6,
            GlobalAvgPool::backward(b, a6.nhwc("test").unwrap(), &g7).unwrap(),
        )
        .unwrap();
        let g_sc = net.shortcut.backward(b, &a3, &g6).unwrap().unwrap();
        let g4 = net.branch_bn.backward(b, &a4, &g6).unwrap();
        let g_branch = net.branch.backward(b, &a3, &g4).unwrap().unwrap();
        let g3 = ResidualAdd::merge_grads(b, g_branch, &g_sc).unwrap();
        let g2 = Relu::backward(b, &a2, pool.backward(b, &a2, &g3).unwrap()).unwrap();
        let g1 = net.bn.backward(b, &a1, &g2).unwrap();
        let g0 = net.stem.backward(b, &x0, &g1).unwrap().unwrap();
        let mut grads = g0.to_host(b).unwrap();
        grads.extend(net.stem.weight_grad_oihw(b).unwrap());
        (loss, grads)
    };
    let mut net = make(&stem_w);
    let (_, grads) = loss_and_grads(&mut net, &x, true);
    let (dx, dw) = grads.split_at(x.len());
    let num_dx = numeric_grad(&x, 2e-3, |xv| {
        loss_and_grads(&mut make(&stem_w), xv, false).0
    });
    assert_grad_close("network dx", dx, &num_dx, 5e-2, 2e-4);
    let num_dw = numeric_grad(&stem_w, 2e-3, |wv| {
        loss_and_grads(&mut make(wv), &x, false).0
    });
    assert_grad_close("network d(stem weight)", dw, &num_dw, 5e-2, 2e-4);
}

/// Outputs come from recycled buffers holding stale values; the results must not depend
/// on them.
#[test]
fn layer_outputs_do_not_depend_on_recycled_buffer_contents() {
    let fresh = &CpuBackend::new();
    let reused = &CpuBackend::new();
    let shape = [1, 64, 64, 16];
    let x = uniform(shape.iter().product(), 81, -1.0, 1.0);
    let mut conv_fresh = Conv2d::new(fresh, 16, 16, 3, 1, 1).unwrap();
    let mut conv_reused = Conv2d::new(reused, 16, 16, 3, 1, 1).unwrap();
    let w = uniform(16 * 16 * 9, 82, -0.3, 0.3);
    conv_fresh.set_weight_oihw(fresh, &w).unwrap();
    conv_reused.set_weight_oihw(reused, &w).unwrap();
    for _ in 0..4 {
        drop(t(reused, &shape, &vec![f32::NAN; x.len()]));
    }
    assert!(reused.pool().pooled_bytes() >= x.len() * 4);
    let run = |b: &CpuBackend, conv: &mut Conv2d<CpuBackend>| {
        let xt = t(b, &shape, &x);
        let mut bn = BatchNorm2d::new(b, 16).unwrap();
        let y = Relu::forward(b, bn.forward(b, &conv.forward(b, &xt).unwrap()).unwrap()).unwrap();
        let dx = conv.backward(b, &xt, &y).unwrap().unwrap();
        let mut host = y.to_host(b).unwrap();
        host.extend(dx.to_host(b).unwrap());
        host
    };
    let a = run(fresh, &mut conv_fresh);
    let b = run(reused, &mut conv_reused);
    assert!(b.iter().all(|v| v.is_finite()));
    assert_eq!(a, b);
}
