//! Runs every op of one backend against a reference backend on the same inputs and
//! reports how far apart the outputs are, so a new device backend is checked op by op
//! against the CPU before it trains anything.

use serde::Serialize;

use super::{
    Backend, BatchNormBuffers, BatchNormGrads, BatchNormParams, BatchNormSaved, Conv2dParams,
    CrossEntropyParams, GlobalPoolParams, LinearParams, PoolParams,
};
use crate::engine::layers::SoftmaxCrossEntropy;
use crate::engine::model::Model;
use crate::engine::rng::CounterRng;
use crate::engine::train::ModelChoice;
use crate::engine::{Precision, Result, Tensor};

/// How one output of one op compares: the worst element-wise difference and the
/// difference's norm relative to the reference's norm.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OpComparison {
    /// The op as its [`Backend`] method is named, followed by the case's label where an op
    /// is checked on several shapes, e.g. `linear_backward`.
    pub op: String,
    /// Which of the op's outputs, e.g. `dx` or `db`.
    pub output: String,
    /// Elements in the reference's output.
    pub elements: usize,
    /// The largest absolute difference over the elements both sides give finite.
    pub worst_abs: f64,
    /// RMS relative error ‖got − want‖ / ‖want‖; infinite when the lengths differ or one side
    /// is non-finite where the other is not.
    pub relative: f64,
    /// The largest `relative` that passes.
    pub tolerance: f64,
    /// Whether `relative` is within `tolerance`.
    pub passed: bool,
}

/// Tolerances on the relative error: f32 arithmetic in a different order lands far under
/// `EXACT`; GEMM-based ops may run on TF32 tensor cores, which keep 10 mantissa bits.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Tolerances {
    /// Bound for ops computed in plain f32 on both sides (element-wise ops, pooling, biases);
    /// batch norm and the loss, which sum over a whole batch, get ten times it.
    pub exact: f64,
    /// Bound for convolutions and the linear layer, which may run as TF32 GEMMs.
    pub gemm: f64,
}

impl Default for Tolerances {
    fn default() -> Self {
        Tolerances {
            exact: 1e-5,
            gemm: 5e-3,
        }
    }
}

impl Tolerances {
    /// For two backends storing activations in `precision` (16-bit): both round the same
    /// f32 results, so they differ where summation order moves a value across a rounding
    /// boundary, by one unit in the last place of the format (2⁻¹¹ relative for fp16,
    /// 2⁻⁸ for bf16) on a few elements. The bound is two such units as an RMS error.
    pub fn sixteen_bit(precision: Precision) -> Tolerances {
        let unit = match precision {
            Precision::Fp16 => 2f64.powi(-11),
            _ => 2f64.powi(-8),
        };
        Tolerances {
            exact: 2.0 * unit,
            gemm: 4.0 * unit,
        }
    }
}

/// Compares `got` with the reference `want` for one output of one op: it passes when the
/// relative RMS error is at most `tolerance`.
pub fn compare(op: &str, output: &str, got: &[f32], want: &[f32], tolerance: f64) -> OpComparison {
    let mut worst_abs = 0.0f64;
    let (mut diff2, mut ref2) = (0.0f64, 0.0f64);
    let mut non_finite = got.len() != want.len();
    for (&g, &w) in got.iter().zip(want) {
        if g.is_finite() != w.is_finite() {
            non_finite = true;
            continue;
        }
        if !w.is_finite() {
            continue;
        }
        let d = (g as f64 - w as f64).abs();
        worst_abs = worst_abs.max(d);
        diff2 += d * d;
        ref2 += (w as f64) * (w as f64);
    }
    let relative = if non_finite {
        f64::INFINITY
    } else if ref2 == 0.0 {
        if diff2 == 0.0 {
            0.0
        } else {
            f64::INFINITY
        }
    } else {
        (diff2 / ref2).sqrt()
    };
    OpComparison {
        op: op.to_string(),
        output: output.to_string(),
        elements: want.len(),
        worst_abs,
        relative,
        tolerance,
        passed: relative <= tolerance,
    }
}

/// Uniform draws in [0, 1) in order from one counter stream.
struct Rng {
    stream: CounterRng,
    next: u64,
}

impl Rng {
    fn new(seed: u64) -> Self {
        Rng {
            stream: CounterRng::new(seed, 0),
            next: 0,
        }
    }

    fn next_f32(&mut self) -> f32 {
        self.next += 1;
        self.stream.uniform(self.next) as f32
    }
}

/// One backend under test beside the reference, with inputs drawn from one generator.
struct Pair<'a, T: Backend, R: Backend> {
    test: &'a T,
    reference: &'a R,
    rng: Rng,
    tol: Tolerances,
    results: Vec<OpComparison>,
}

/// Batch norm's gradients on the test backend and on the reference.
type BnGradsPair<T, R> = (
    BatchNormGrads<<T as Backend>::Buffer>,
    BatchNormGrads<<R as Backend>::Buffer>,
);

struct Both<T: Backend, R: Backend> {
    t: T::Buffer,
    r: R::Buffer,
    host: Vec<f32>,
}

impl<'a, T: Backend, R: Backend> Pair<'a, T, R> {
    fn new(test: &'a T, reference: &'a R, seed: u64, tol: Tolerances) -> Self {
        Pair {
            test,
            reference,
            rng: Rng::new(seed),
            tol,
            results: Vec::new(),
        }
    }

    fn random(&mut self, len: usize, scale: f32) -> Result<Both<T, R>> {
        let host: Vec<f32> = (0..len)
            .map(|_| (self.rng.next_f32() * 2.0 - 1.0) * scale)
            .collect();
        self.both(host)
    }

    fn both(&mut self, host: Vec<f32>) -> Result<Both<T, R>> {
        Ok(Both {
            t: self.test.upload(&host)?,
            r: self.reference.upload(&host)?,
            host,
        })
    }

    /// Op outputs, allocated as a model allocates them: the op under test must ready the
    /// buffer itself.
    fn alloc(&mut self, len: usize) -> Result<Both<T, R>> {
        Ok(Both {
            t: self.test.alloc(len)?,
            r: self.reference.alloc(len)?,
            host: vec![0.0; len],
        })
    }

    fn record(&mut self, op: &str, output: &str, b: &Both<T, R>, tolerance: f64) -> Result<()> {
        self.record_pair(op, output, &b.t, &b.r, tolerance)
    }

    /// Downloads the test backend's `t` and the reference's `r` and records how far apart
    /// they are as `op`'s `output`.
    fn record_pair(
        &mut self,
        op: &str,
        output: &str,
        t: &T::Buffer,
        r: &R::Buffer,
        tolerance: f64,
    ) -> Result<()> {
        let mut got = vec![0.0; self.test.buffer_len(t)];
        let mut want = vec![0.0; self.reference.buffer_len(r)];
        self.test.download(t, &mut got)?;
        self.reference.download(r, &mut want)?;
        self.results
            .push(compare(op, output, &got, &want, tolerance));
        Ok(())
    }

    /// Batch norm's dγ and dβ, allocated on each backend.
    fn bn_grads(&mut self, c: usize) -> Result<BnGradsPair<T, R>> {
        let t = BatchNormGrads {
            gamma: self.test.alloc(c)?,
            beta: self.test.alloc(c)?,
        };
        let r = BatchNormGrads {
            gamma: self.reference.alloc(c)?,
            beta: self.reference.alloc(c)?,
        };
        Ok((t, r))
    }

    fn conv(&mut self, label: &str, p: Conv2dParams) -> Result<()> {
        let x = self.random(p.input_len(), 1.0)?;
        let w = self.random(p.weight_len(), 0.2)?;
        let mut y = self.alloc(p.output_len())?;
        self.test.conv2d_forward(&p, &x.t, &w.t, &mut y.t)?;
        self.reference.conv2d_forward(&p, &x.r, &w.r, &mut y.r)?;
        let g = self.tol.gemm;
        self.record(&format!("conv2d_forward {label}"), "y", &y, g)?;
        let dy = self.random(p.output_len(), 1.0)?;
        let mut dx = self.alloc(p.input_len())?;
        self.test.conv2d_backward_data(&p, &dy.t, &w.t, &mut dx.t)?;
        self.reference
            .conv2d_backward_data(&p, &dy.r, &w.r, &mut dx.r)?;
        self.record(&format!("conv2d_backward_data {label}"), "dx", &dx, g)?;
        let mut dw = self.alloc(p.weight_len())?;
        self.test
            .conv2d_backward_filter(&p, &x.t, &dy.t, &mut dw.t)?;
        self.reference
            .conv2d_backward_filter(&p, &x.r, &dy.r, &mut dw.r)?;
        self.record(&format!("conv2d_backward_filter {label}"), "dw", &dw, g)
    }

    fn batch_norm(&mut self, p: BatchNormParams) -> Result<()> {
        let c = p.channels;
        let e = self.tol.exact * 10.0;
        // An offset far from zero exercises the shifted statistics.
        let x_host: Vec<f32> = (0..p.rows * c)
            .map(|i| 3.0 + (self.rng.next_f32() * 2.0 - 1.0) * (1.0 + (i % c) as f32 * 0.1))
            .collect();
        let x = self.both(x_host)?;
        let gamma = self.random(c, 1.0)?;
        let beta = self.random(c, 1.0)?;
        let rm = self.random(c, 0.5)?;
        let rv_host: Vec<f32> = (0..c).map(|_| 0.5 + self.rng.next_f32()).collect();
        let rv = self.both(rv_host)?;
        let mut bn_t = BatchNormBuffers {
            gamma: self.test.upload(&gamma.host)?,
            beta: self.test.upload(&beta.host)?,
            running_mean: self.test.upload(&rm.host)?,
            running_var: self.test.upload(&rv.host)?,
        };
        let mut bn_r = BatchNormBuffers {
            gamma: self.reference.upload(&gamma.host)?,
            beta: self.reference.upload(&beta.host)?,
            running_mean: self.reference.upload(&rm.host)?,
            running_var: self.reference.upload(&rv.host)?,
        };
        let mut saved_t = BatchNormSaved {
            mean: self.test.alloc(c)?,
            inv_std: self.test.alloc(c)?,
        };
        let mut saved_r = BatchNormSaved {
            mean: self.reference.alloc(c)?,
            inv_std: self.reference.alloc(c)?,
        };
        let mut y = self.alloc(p.rows * c)?;
        self.test
            .batch_norm_forward_train(&p, &x.t, &mut bn_t, &mut saved_t, &mut y.t)?;
        self.reference
            .batch_norm_forward_train(&p, &x.r, &mut bn_r, &mut saved_r, &mut y.r)?;
        self.record("batch_norm_forward_train", "y", &y, e)?;
        let pairs = [
            ("running mean", &bn_t.running_mean, &bn_r.running_mean),
            ("running var", &bn_t.running_var, &bn_r.running_var),
            ("saved mean", &saved_t.mean, &saved_r.mean),
            ("saved inv_std", &saved_t.inv_std, &saved_r.inv_std),
        ];
        for (name, t, r) in pairs {
            self.record_pair("batch_norm_forward_train", name, t, r, e)?;
        }
        let mut y_eval = self.alloc(p.rows * c)?;
        self.test
            .batch_norm_forward_eval(&p, &x.t, &bn_t, &mut y_eval.t)?;
        self.reference
            .batch_norm_forward_eval(&p, &x.r, &bn_r, &mut y_eval.r)?;
        self.record("batch_norm_forward_eval", "y", &y_eval, e)?;
        let dy = self.random(p.rows * c, 1.0)?;
        let mut dx = self.alloc(p.rows * c)?;
        let (mut grads_t, mut grads_r) = self.bn_grads(c)?;
        self.test.batch_norm_backward(
            &p,
            &x.t,
            &dy.t,
            &bn_t.gamma,
            &saved_t,
            &mut dx.t,
            &mut grads_t,
        )?;
        self.reference.batch_norm_backward(
            &p,
            &x.r,
            &dy.r,
            &bn_r.gamma,
            &saved_r,
            &mut dx.r,
            &mut grads_r,
        )?;
        self.record("batch_norm_backward", "dx", &dx, e * 10.0)?;
        // The fused BN + ReLU forms, on the same state.
        let mut y_relu = self.alloc(p.rows * c)?;
        self.test.batch_norm_relu_forward_train(
            &p,
            &x.t,
            &mut bn_t,
            &mut saved_t,
            &mut y_relu.t,
        )?;
        self.reference.batch_norm_relu_forward_train(
            &p,
            &x.r,
            &mut bn_r,
            &mut saved_r,
            &mut y_relu.r,
        )?;
        self.record("batch_norm_relu_forward_train", "y", &y_relu, e)?;
        let mut y_relu_eval = self.alloc(p.rows * c)?;
        self.test
            .batch_norm_relu_forward_eval(&p, &x.t, &bn_t, &mut y_relu_eval.t)?;
        self.reference
            .batch_norm_relu_forward_eval(&p, &x.r, &bn_r, &mut y_relu_eval.r)?;
        self.record("batch_norm_relu_forward_eval", "y", &y_relu_eval, e)?;
        let mut dy_relu = self.random(p.rows * c, 1.0)?;
        let mut dx_relu = self.alloc(p.rows * c)?;
        let (mut grads_relu_t, mut grads_relu_r) = self.bn_grads(c)?;
        self.test.batch_norm_relu_backward(
            &p,
            &x.t,
            &y_relu.t,
            &mut dy_relu.t,
            &bn_t.gamma,
            &saved_t,
            &mut dx_relu.t,
            &mut grads_relu_t,
        )?;
        self.reference.batch_norm_relu_backward(
            &p,
            &x.r,
            &y_relu.r,
            &mut dy_relu.r,
            &bn_r.gamma,
            &saved_r,
            &mut dx_relu.r,
            &mut grads_relu_r,
        )?;
        self.record("batch_norm_relu_backward", "dx", &dx_relu, e * 10.0)?;
        for (name, t, r) in [
            ("dgamma", &grads_relu_t.gamma, &grads_relu_r.gamma),
            ("dbeta", &grads_relu_t.beta, &grads_relu_r.beta),
        ] {
            self.record_pair("batch_norm_relu_backward", name, t, r, e)?;
        }
        for (name, t, r) in [
            ("dgamma", &grads_t.gamma, &grads_r.gamma),
            ("dbeta", &grads_t.beta, &grads_r.beta),
        ] {
            self.record_pair("batch_norm_backward", name, t, r, e)?;
        }
        Ok(())
    }

    fn pools(&mut self) -> Result<()> {
        let e = self.tol.exact;
        let p = PoolParams {
            batch: 2,
            in_h: 11,
            in_w: 9,
            channels: 5,
            kernel: 3,
            stride: 2,
            padding: 1,
        };
        let x = self.random(p.input_len(), 1.0)?;
        let mut y = self.alloc(p.output_len())?;
        self.test.max_pool_forward(&p, &x.t, &mut y.t)?;
        self.reference.max_pool_forward(&p, &x.r, &mut y.r)?;
        self.record("max_pool_forward", "y", &y, e)?;
        let dy = self.random(p.output_len(), 1.0)?;
        let mut dx = self.alloc(p.input_len())?;
        self.test.max_pool_backward(&p, &x.t, &dy.t, &mut dx.t)?;
        self.reference
            .max_pool_backward(&p, &x.r, &dy.r, &mut dx.r)?;
        self.record("max_pool_backward", "dx", &dx, e)?;

        let g = GlobalPoolParams {
            batch: 3,
            spatial: 49,
            channels: 37,
        };
        let x = self.random(g.batch * g.spatial * g.channels, 1.0)?;
        let mut y = self.alloc(g.batch * g.channels)?;
        self.test.global_avg_pool_forward(&g, &x.t, &mut y.t)?;
        self.reference.global_avg_pool_forward(&g, &x.r, &mut y.r)?;
        self.record("global_avg_pool_forward", "y", &y, e)?;
        let dy = self.random(g.batch * g.channels, 1.0)?;
        let mut dx = self.alloc(g.batch * g.spatial * g.channels)?;
        self.test.global_avg_pool_backward(&g, &dy.t, &mut dx.t)?;
        self.reference
            .global_avg_pool_backward(&g, &dy.r, &mut dx.r)?;
        self.record("global_avg_pool_backward", "dx", &dx, e)
    }

    fn linear(&mut self) -> Result<()> {
        let g = self.tol.gemm;
        let p = LinearParams {
            batch: 6,
            in_features: 70,
            out_features: 33,
        };
        let x = self.random(p.batch * p.in_features, 1.0)?;
        let w = self.random(p.out_features * p.in_features, 0.1)?;
        let b = self.random(p.out_features, 1.0)?;
        let mut y = self.alloc(p.batch * p.out_features)?;
        self.test.linear_forward(&p, &x.t, &w.t, &b.t, &mut y.t)?;
        self.reference
            .linear_forward(&p, &x.r, &w.r, &b.r, &mut y.r)?;
        self.record("linear_forward", "y", &y, g)?;
        let dy = self.random(p.batch * p.out_features, 1.0)?;
        let mut dx = self.alloc(p.batch * p.in_features)?;
        let mut dw = self.alloc(p.out_features * p.in_features)?;
        let mut db = self.alloc(p.out_features)?;
        self.test
            .linear_backward(&p, &x.t, &w.t, &dy.t, Some(&mut dx.t), &mut dw.t, &mut db.t)?;
        self.reference.linear_backward(
            &p,
            &x.r,
            &w.r,
            &dy.r,
            Some(&mut dx.r),
            &mut dw.r,
            &mut db.r,
        )?;
        self.record("linear_backward", "dx", &dx, g)?;
        self.record("linear_backward", "dw", &dw, g)?;
        self.record("linear_backward", "db", &db, self.tol.exact)
    }

    fn cross_entropy(&mut self) -> Result<()> {
        let e = self.tol.exact * 10.0;
        let p = CrossEntropyParams {
            batch: 5,
            classes: 1000,
            label_smoothing: 0.1,
        };
        let logits = self.random(p.batch * p.classes, 4.0)?;
        // The last sample is padding and must count for nothing.
        let labels = self.both(vec![3.0, 999.0, 0.0, 512.0, -1.0])?;
        let mut loss = self.alloc(1)?;
        let mut correct = self.alloc(p.batch)?;
        self.test
            .cross_entropy_forward(&p, &logits.t, &labels.t, &mut loss.t, &mut correct.t)?;
        self.reference.cross_entropy_forward(
            &p,
            &logits.r,
            &labels.r,
            &mut loss.r,
            &mut correct.r,
        )?;
        self.record("cross_entropy_forward", "loss", &loss, e)?;
        self.record("cross_entropy_forward", "correct", &correct, 0.0)?;
        let mut dz = self.alloc(p.batch * p.classes)?;
        self.test
            .cross_entropy_backward(&p, &logits.t, &labels.t, &mut dz.t)?;
        self.reference
            .cross_entropy_backward(&p, &logits.r, &labels.r, &mut dz.r)?;
        self.record("cross_entropy_backward", "dlogits", &dz, e)
    }

    fn elementwise(&mut self) -> Result<()> {
        let e = self.tol.exact;
        let n = 100_003;
        let a = self.random(n, 1.0)?;
        let b = self.random(n, 1.0)?;
        let mut out = self.alloc(n)?;
        self.test.add(&a.t, &b.t, &mut out.t)?;
        self.reference.add(&a.r, &b.r, &mut out.r)?;
        self.record("add", "out", &out, e)?;
        self.test.add_assign(&mut out.t, &a.t)?;
        self.reference.add_assign(&mut out.r, &a.r)?;
        self.record("add_assign", "dst", &out, e)?;
        self.test.scale(&mut out.t, -0.37)?;
        self.reference.scale(&mut out.r, -0.37)?;
        self.record("scale", "x", &out, e)?;
        self.test.axpy(0.25, &b.t, &mut out.t)?;
        self.reference.axpy(0.25, &b.r, &mut out.r)?;
        self.record("axpy", "y", &out, e)?;
        self.test.relu_forward(&mut out.t)?;
        self.reference.relu_forward(&mut out.r)?;
        self.record("relu_forward", "x", &out, e)?;
        let mut dy = self.random(n, 1.0)?;
        self.test.relu_backward(&out.t, &mut dy.t)?;
        self.reference.relu_backward(&out.r, &mut dy.r)?;
        self.record("relu_backward", "dy", &dy, e)?;
        let mut w = self.random(n, 1.0)?;
        let mut mom = self.random(n, 0.1)?;
        self.test
            .momentum_update(&mut w.t, &b.t, &mut mom.t, 0.9, 0.05, 2e-4)?;
        self.reference
            .momentum_update(&mut w.r, &b.r, &mut mom.r, 0.9, 0.05, 2e-4)?;
        self.record("momentum_update", "w", &w, e)?;
        self.record("momentum_update", "b", &mom, e)?;
        let mut sums = self.alloc(3)?;
        for (i, x) in [&a, &b, &dy].into_iter().enumerate() {
            self.test.sum_squares(&x.t, &mut sums.t, i)?;
            self.reference.sum_squares(&x.r, &mut sums.r, i)?;
        }
        self.record("sum_squares", "out", &sums, e)?;
        let mut copy = self.alloc(n)?;
        self.test.copy(&a.t, &mut copy.t)?;
        self.reference.copy(&a.r, &mut copy.r)?;
        self.record("copy", "dst", &copy, 0.0)?;
        self.test.fill(&mut copy.t, 1.25)?;
        self.reference.fill(&mut copy.r, 1.25)?;
        self.record("fill", "buffer", &copy, 0.0)?;
        let mut poisoned = a.host.clone();
        poisoned[n / 2] = f32::NAN;
        let finite_t = self.test.has_non_finite(&a.t)?;
        let p = self.both(poisoned)?;
        let nan_t = self.test.has_non_finite(&p.t)?;
        let flags = [finite_t as u8 as f32, nan_t as u8 as f32];
        self.results
            .push(compare("has_non_finite", "flag", &flags, &[0.0, 1.0], 0.0));
        Ok(())
    }
}

/// Every op of `test` against `reference` on the same random inputs, on shapes that
/// cover each code path (3×3, 7×7 and 1×1 convolutions at strides 1 and 2, padding,
/// channel counts that are no multiple of anything, a padded sample in the loss).
pub fn check_ops<T: Backend, R: Backend>(
    test: &T,
    reference: &R,
    seed: u64,
    tol: Tolerances,
) -> Result<Vec<OpComparison>> {
    let mut pair = Pair::new(test, reference, seed, tol);
    let conv = |batch, in_h, in_w, in_c, out_c, k, stride, padding| Conv2dParams {
        batch,
        in_h,
        in_w,
        in_c,
        out_c,
        kernel_h: k,
        kernel_w: k,
        stride,
        padding,
    };
    pair.conv("3x3 s1", conv(2, 9, 7, 5, 7, 3, 1, 1))?;
    pair.conv("3x3 s2", conv(3, 10, 11, 6, 4, 3, 2, 1))?;
    pair.conv("7x7 s2", conv(2, 20, 18, 3, 8, 7, 2, 3))?;
    pair.conv("1x1 s1", conv(2, 6, 5, 13, 9, 1, 1, 0))?;
    pair.conv("1x1 s2", conv(2, 8, 7, 10, 6, 1, 2, 0))?;
    // Enough channels for device backends' whole-row paths.
    pair.conv("3x3 s1 c33", conv(2, 9, 7, 33, 7, 3, 1, 1))?;
    pair.conv("3x3 s2 c40", conv(3, 10, 11, 40, 12, 3, 2, 1))?;
    pair.conv("1x1 s2 c24", conv(2, 8, 7, 24, 6, 1, 2, 0))?;
    pair.conv("7x7 s2 c16", conv(1, 15, 13, 16, 5, 7, 2, 3))?;
    // Channel counts that device backends take one element at a time and four at a time.
    for (rows, channels) in [(2 * 1024 + 37, 45), (3 * 128 + 5, 64)] {
        let first = pair.results.len();
        pair.batch_norm(BatchNormParams {
            rows,
            channels,
            eps: 1e-5,
            momentum: 0.1,
        })?;
        for result in &mut pair.results[first..] {
            result.op = format!("{} c{channels}", result.op);
        }
    }
    pair.pools()?;
    pair.linear()?;
    pair.cross_entropy()?;
    pair.elementwise()?;
    Ok(pair.results)
}

/// The three passes of each labelled convolution of `test` against `reference` on random
/// inputs: forward, data gradient and filter gradient, each held to `tol.gemm`.
pub fn check_convolutions<T: Backend, R: Backend>(
    test: &T,
    reference: &R,
    seed: u64,
    tol: Tolerances,
    shapes: &[(String, Conv2dParams)],
) -> Result<Vec<OpComparison>> {
    let mut pair = Pair::new(test, reference, seed, tol);
    for (label, p) in shapes {
        pair.conv(label, *p)?;
    }
    Ok(pair.results)
}

/// Bounds on a whole training step's disagreement, relative to the reference's norm.
///
/// Gradients need far looser bounds than single ops: a ReLU whose input lies within
/// rounding of zero can switch off in one backend and not the other, and every gradient
/// upstream of it then moves. Two CPU backends that only tile their convolutions
/// differently disagree by 1e-2 on ResNet-50's gradients at batch 4 (one such flip at
/// `layer3.2.bn2`, everything after it in the backward pass within 1e-5), while a wrong
/// kernel shows as an error of order one.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StepTolerances {
    /// Logits and loss.
    pub outputs: f64,
    /// Every gradient as one vector.
    pub all_gradients: f64,
    /// The worst single parameter's gradient.
    pub single_parameter: f64,
}

impl Default for StepTolerances {
    fn default() -> Self {
        StepTolerances {
            outputs: 1e-3,
            all_gradients: 5e-2,
            single_parameter: 1e-1,
        }
    }
}

/// The shape of a training step to compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepShape {
    /// The network whose step is compared.
    pub model: ModelChoice,
    /// Images in the batch.
    pub batch: usize,
    /// Side of the square input images, in pixels.
    pub image_size: usize,
    /// Classes the network predicts.
    pub classes: usize,
}

/// The step the 16-bit checks compare: ResNet-20 at CIFAR size. With 16-bit storage every
/// stored value can sit a rounding unit away from the reference's, so ReLUs near zero flip
/// far more often than in f32, and over ResNet-50's depth the flips compound: two CPU
/// references that only sum in another order disagree by about 0.5 on its fp16 gradients,
/// which would hide a wrong kernel. Over ResNet-20 they stay near 2e-2.
pub const SIXTEEN_BIT_STEP: StepShape = StepShape {
    model: ModelChoice::ResNet20,
    batch: 4,
    image_size: 32,
    classes: 10,
};

impl StepTolerances {
    /// For a [`SIXTEEN_BIT_STEP`] with 16-bit activations against the CPU reference with
    /// the same storage: five times the f32 bounds on the outputs and on all gradients
    /// together, still well under the error of order one a wrong kernel gives. A single
    /// small parameter's gradient (a batch norm's γ over 16 channels) is dominated by the
    /// ReLUs that flip, up to 0.3 between correct backends in bf16, so it is only held to
    /// being of the right sign and size overall; the op checks hold each kernel tightly.
    pub fn sixteen_bit() -> StepTolerances {
        let f32 = StepTolerances::default();
        StepTolerances {
            outputs: 5.0 * 2f64.powi(-8),
            all_gradients: 5.0 * f32.all_gradients,
            single_parameter: 1.0,
        }
    }
}

/// One training step's gradients and loss of `model` on `test` against `reference`,
/// from the same seeded weights and the same synthetic batch.
pub fn check_training_step<T: Backend, R: Backend>(
    test: &T,
    reference: &R,
    model: ModelChoice,
    batch: usize,
    image_size: usize,
    classes: usize,
    tol: StepTolerances,
) -> Result<Vec<OpComparison>> {
    let mut results = Vec::new();
    let mut m_t = model.build(test, classes, image_size, 7)?;
    let mut m_r = model.build(reference, classes, image_size, 7)?;
    let len = batch * image_size * image_size * 3;
    let mut rng = Rng::new(11);
    let images: Vec<f32> = (0..len).map(|_| (rng.next_f32() - 0.5) * 200.0).collect();
    let labels: Vec<f32> = (0..batch).map(|i| (i * 37 % classes) as f32).collect();
    let loss_fn = SoftmaxCrossEntropy {
        label_smoothing: 0.1,
    };
    let shape = [batch, image_size, image_size, 3];
    let x_t = Tensor::from_host(test, &shape, &images)?;
    let x_r = Tensor::from_host(reference, &shape, &images)?;
    let y_t = Tensor::from_host(test, &[batch], &labels)?;
    let y_r = Tensor::from_host(reference, &[batch], &labels)?;
    let logits_t = m_t.forward(test, &x_t, true)?;
    let logits_r = m_r.forward(reference, &x_r, true)?;
    results.push(compare(
        "training step",
        "logits",
        &logits_t.to_host(test)?,
        &logits_r.to_host(reference)?,
        tol.outputs,
    ));
    let out_t = loss_fn.forward(test, &logits_t, &y_t)?;
    let out_r = loss_fn.forward(reference, &logits_r, &y_r)?;
    results.push(compare(
        "training step",
        "loss",
        &out_t.loss.to_host(test)?,
        &out_r.loss.to_host(reference)?,
        tol.outputs,
    ));
    let d_t = loss_fn.backward(test, &logits_t, &y_t)?;
    let d_r = loss_fn.backward(reference, &logits_r, &y_r)?;
    m_t.backward(test, &d_t)?;
    m_r.backward(reference, &d_r)?;
    let params_t = m_t.parameters();
    let params_r = m_r.parameters();
    let (mut all_t, mut all_r) = (Vec::new(), Vec::new());
    let mut worst: Option<OpComparison> = None;
    for (pt, pr) in params_t.iter().zip(&params_r) {
        let mut got = vec![0.0; test.buffer_len(pt.param.grad)];
        let mut want = vec![0.0; reference.buffer_len(pr.param.grad)];
        test.download(pt.param.grad, &mut got)?;
        reference.download(pr.param.grad, &mut want)?;
        let c = compare(
            "training step",
            &format!("grad {}", pt.name),
            &got,
            &want,
            tol.single_parameter,
        );
        if worst.as_ref().is_none_or(|w| c.relative > w.relative) {
            worst = Some(c);
        }
        all_t.extend(got);
        all_r.extend(want);
    }
    results.push(compare(
        "training step",
        "all gradients",
        &all_t,
        &all_r,
        tol.all_gradients,
    ));
    results.extend(worst);
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::CpuBackend;

    #[test]
    fn comparison_is_relative_to_the_reference_norm() {
        let c = compare("op", "y", &[1.0, 2.0, 3.1], &[1.0, 2.0, 3.0], 0.1);
        assert!((c.worst_abs - 0.1).abs() < 1e-6);
        assert!((c.relative - 0.1 / 14f64.sqrt()).abs() < 1e-6);
        assert!(c.passed);
        let c = compare("op", "y", &[1.0, f32::NAN], &[1.0, 2.0], 1.0);
        assert!(!c.passed, "a NaN where the reference is finite fails");
        let c = compare("op", "y", &[0.0, 0.0], &[0.0, 0.0], 0.0);
        assert!(c.passed);
        let c = compare("op", "y", &[1.0], &[1.0, 2.0], 1.0);
        assert!(!c.passed, "a length mismatch fails");
    }

    #[test]
    fn tiled_cpu_convolutions_match_the_default_cpu_backend_op_by_op() {
        let tiled = CpuBackend::with_conv_tile_rows(3);
        let plain = CpuBackend::new();
        let results = check_ops(&tiled, &plain, 5, Tolerances::default()).unwrap();
        assert!(results.len() > 30, "{} comparisons", results.len());
        for r in &results {
            assert!(r.passed, "{r:?}");
        }
        assert!(results
            .iter()
            .any(|r| r.op == "conv2d_backward_data 7x7 s2"));
        assert!(results.iter().any(|r| r.op == "has_non_finite"));
    }

    #[test]
    fn sixteen_bit_backends_that_sum_in_another_order_pass_the_sixteen_bit_bounds() {
        use crate::engine::backend::half_storage::HalfStorageCpu;
        for precision in [Precision::Fp16, Precision::Bf16] {
            let tiled = HalfStorageCpu::new(CpuBackend::with_conv_tile_rows(3), precision).unwrap();
            let plain =
                HalfStorageCpu::new(CpuBackend::with_gemm_convolutions(), precision).unwrap();
            let tol = Tolerances::sixteen_bit(precision);
            let results = check_ops(&tiled, &plain, 6, tol).unwrap();
            for r in &results {
                assert!(r.passed, "{precision}: {r:?}");
            }
            // The 16-bit reference is not the f32 backend: the bounds see the difference.
            let f32_results = check_ops(&CpuBackend::new(), &plain, 6, tol).unwrap();
            assert!(
                f32_results.iter().any(|r| !r.passed),
                "{precision}: f32 passed as {precision}"
            );
        }
        for precision in [Precision::Fp16, Precision::Bf16] {
            // Direct convolutions sum in another order than the tiled GEMMs, as a GPU's
            // kernels do.
            let tiled = HalfStorageCpu::new(CpuBackend::with_conv_tile_rows(5), precision).unwrap();
            let plain =
                HalfStorageCpu::new(CpuBackend::with_direct_convolutions(), precision).unwrap();
            let StepShape {
                model,
                batch,
                image_size,
                classes,
            } = SIXTEEN_BIT_STEP;
            let results = check_training_step(
                &tiled,
                &plain,
                model,
                batch,
                image_size,
                classes,
                StepTolerances::sixteen_bit(),
            )
            .unwrap();
            for r in &results {
                eprintln!("{precision} {} {}: {:.3e}", r.op, r.output, r.relative);
                assert!(r.passed, "{precision}: {r:?}");
            }
        }
    }

    #[test]
    fn a_wrong_op_is_caught() {
        let c = compare("op", "y", &[1.0, 2.0], &[1.0, -2.0], 1e-3);
        assert!(!c.passed);
        assert!(c.relative > 1.0);
    }

    #[test]
    fn a_training_step_matches_across_cpu_tilings() {
        let tiled = CpuBackend::with_conv_tile_rows(5);
        let plain = CpuBackend::new();
        let tight = StepTolerances {
            outputs: 1e-4,
            all_gradients: 1e-3,
            single_parameter: 1e-2,
        };
        let results =
            check_training_step(&tiled, &plain, ModelChoice::ResNet20, 2, 16, 10, tight).unwrap();
        assert_eq!(results.len(), 4);
        assert_eq!(results[2].output, "all gradients");
        for r in &results {
            assert!(r.passed, "{r:?}");
        }
    }
}
