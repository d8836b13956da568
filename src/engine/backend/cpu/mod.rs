//! The CPU backend: f32 buffers in host memory, multi-threaded on the rayon pool, GEMMs
//! through the `gemm` crate (AVX-512 kernels where the CPU has them), and direct AVX-512
//! convolutions for narrow layers where the CPU has AVX-512.

mod batchnorm;
mod batchnorm_avx512;
mod buffer;
mod conv;
mod direct_conv;
mod elementwise;
pub mod gemm;
mod linear;
mod loss;
mod pool;
mod scratch;

use super::{
    Backend, BatchNormBuffers, BatchNormGrads, BatchNormParams, BatchNormSaved, Conv2dParams,
    CrossEntropyParams, GlobalPoolParams, LinearParams, PoolParams,
};
use crate::engine::{EngineError, Result};

pub use buffer::{BufferPool, CpuBuffer};

use std::sync::Arc;

/// Default cap on memory kept for reuse: enough for every activation size of a
/// ResNet-50 step to find its buffer again.
pub const DEFAULT_POOL_LIMIT_BYTES: usize = 8 << 30;

/// The reference backend: f32 buffers in host memory recycled through a [`BufferPool`], ops
/// on the rayon pool. Clones share the pool.
#[derive(Debug, Clone)]
pub struct CpuBackend {
    tiling: conv::Tiling,
    /// Whether narrow convolutions may take the direct kernels instead of im2col GEMMs.
    direct_convolutions: bool,
    pool: Arc<BufferPool>,
}

/// Whether [`CpuBackend::new`] lets narrow convolutions take the direct kernels. They are
/// this crate's own code, so an unoptimised (debug) build runs them many times slower than
/// the GEMM path, whose crate is always built optimised; there the GEMMs stay the default
/// and tests ask for the direct kernels by name.
const DIRECT_CONVOLUTIONS_BY_DEFAULT: bool = !cfg!(debug_assertions);

impl Default for CpuBackend {
    fn default() -> Self {
        CpuBackend {
            tiling: conv::Tiling::default(),
            direct_convolutions: DIRECT_CONVOLUTIONS_BY_DEFAULT,
            pool: BufferPool::new(DEFAULT_POOL_LIMIT_BYTES),
        }
    }
}

impl CpuBackend {
    /// A backend with the default pool limit and convolution kernels chosen for the build profile.
    pub fn new() -> Self {
        Self::default()
    }

    /// A backend whose convolutions all run as im2col GEMMs with tiles of exactly `rows`
    /// output rows, so tests can exercise tiles that straddle rows and images on tiny
    /// shapes.
    pub fn with_conv_tile_rows(rows: usize) -> Self {
        CpuBackend {
            tiling: conv::Tiling {
                fixed_rows: Some(rows.max(1)),
            },
            direct_convolutions: false,
            ..Self::default()
        }
    }

    /// A backend whose convolutions all run as im2col GEMMs: the reference the direct
    /// kernels are checked and measured against.
    pub fn with_gemm_convolutions() -> Self {
        CpuBackend {
            direct_convolutions: false,
            ..Self::default()
        }
    }

    /// A backend whose narrow convolutions take the direct kernels where the CPU has them,
    /// whatever the build profile.
    pub fn with_direct_convolutions() -> Self {
        CpuBackend {
            direct_convolutions: true,
            ..Self::default()
        }
    }

    /// The pool dropped buffers return to (see [`BufferPool`]).
    pub fn pool(&self) -> &BufferPool {
        &self.pool
    }

    /// Threads the backend's parallel loops use: the size of the current rayon pool.
    pub fn threads(&self) -> usize {
        rayon::current_num_threads().max(1)
    }
}

fn check(op: &'static str, what: &'static str, buf: &CpuBuffer, expected: usize) -> Result<()> {
    EngineError::check_length(op, what, expected, buf.as_slice().len())
}

fn check_same(op: &'static str, a: &CpuBuffer, b: &CpuBuffer) -> Result<()> {
    check(op, "second operand", b, a.as_slice().len())
}

/// An operand's name in errors and the length a convolution's shape gives it.
type ConvOperand = (&'static str, fn(&Conv2dParams) -> usize);

/// One convolution pass: its name for errors, the direct kernel (which returns false
/// for a shape it does not take) and the im2col + GEMM path that serves every shape.
struct ConvPass {
    op: &'static str,
    /// The two operands' and the output's names in errors, and the lengths they must have.
    operands: [ConvOperand; 3],
    direct: fn(&Conv2dParams, &[f32], &[f32], &mut [f32]) -> bool,
    tiled: fn(&Conv2dParams, conv::Tiling, &[f32], &[f32], &mut [f32]),
}

const CONV_FORWARD: ConvPass = ConvPass {
    op: "conv2d_forward",
    operands: [
        ("x", Conv2dParams::input_len),
        ("w", Conv2dParams::weight_len),
        ("y", Conv2dParams::output_len),
    ],
    direct: direct_conv::forward,
    tiled: conv::forward,
};
const CONV_BACKWARD_DATA: ConvPass = ConvPass {
    op: "conv2d_backward_data",
    operands: [
        ("dy", Conv2dParams::output_len),
        ("w", Conv2dParams::weight_len),
        ("dx", Conv2dParams::input_len),
    ],
    direct: direct_conv::backward_data,
    tiled: conv::backward_data,
};
const CONV_BACKWARD_FILTER: ConvPass = ConvPass {
    op: "conv2d_backward_filter",
    operands: [
        ("x", Conv2dParams::input_len),
        ("dy", Conv2dParams::output_len),
        ("dw", Conv2dParams::weight_len),
    ],
    direct: direct_conv::backward_filter,
    tiled: conv::backward_filter,
};

impl CpuBackend {
    /// Checks the shape, the two operands `pass` reads and the one it writes, then runs it:
    /// the direct kernel where enabled and it takes the shape, the tiled path otherwise.
    fn convolve(
        &self,
        pass: &ConvPass,
        p: &Conv2dParams,
        a: &CpuBuffer,
        b: &CpuBuffer,
        out: &mut CpuBuffer,
    ) -> Result<()> {
        p.validate()?;
        let [(a_name, a_len), (b_name, b_len), (out_name, out_len)] = pass.operands;
        check(pass.op, a_name, a, a_len(p))?;
        check(pass.op, b_name, b, b_len(p))?;
        check(pass.op, out_name, out, out_len(p))?;
        let (a, b, out) = (a.as_slice(), b.as_slice(), out.as_mut_slice());
        if !(self.direct_convolutions && (pass.direct)(p, a, b, out)) {
            (pass.tiled)(p, self.tiling, a, b, out);
        }
        Ok(())
    }
}

impl Backend for CpuBackend {
    type Buffer = CpuBuffer;

    fn name(&self) -> String {
        "cpu".into()
    }

    fn alloc(&self, len: usize) -> Result<CpuBuffer> {
        Ok(self.pool.alloc(len))
    }

    fn zeros(&self, len: usize) -> Result<CpuBuffer> {
        let mut buf = self.pool.alloc(len);
        elementwise::fill(buf.as_mut_slice(), 0.0);
        Ok(buf)
    }

    fn upload(&self, host: &[f32]) -> Result<CpuBuffer> {
        let mut buf = self.pool.alloc(host.len());
        buf.as_mut_slice().copy_from_slice(host);
        Ok(buf)
    }

    fn download(&self, buf: &CpuBuffer, host: &mut [f32]) -> Result<()> {
        EngineError::check_length(
            "download",
            "host destination",
            buf.as_slice().len(),
            host.len(),
        )?;
        host.copy_from_slice(buf.as_slice());
        Ok(())
    }

    fn buffer_len(&self, buf: &CpuBuffer) -> usize {
        buf.as_slice().len()
    }

    fn copy(&self, src: &CpuBuffer, dst: &mut CpuBuffer) -> Result<()> {
        check("copy", "destination", dst, src.as_slice().len())?;
        dst.as_mut_slice().copy_from_slice(src.as_slice());
        Ok(())
    }

    fn fill(&self, buf: &mut CpuBuffer, value: f32) -> Result<()> {
        elementwise::fill(buf.as_mut_slice(), value);
        Ok(())
    }

    fn conv2d_forward(
        &self,
        p: &Conv2dParams,
        x: &CpuBuffer,
        w: &CpuBuffer,
        y: &mut CpuBuffer,
    ) -> Result<()> {
        self.convolve(&CONV_FORWARD, p, x, w, y)
    }

    fn conv2d_backward_data(
        &self,
        p: &Conv2dParams,
        dy: &CpuBuffer,
        w: &CpuBuffer,
        dx: &mut CpuBuffer,
    ) -> Result<()> {
        self.convolve(&CONV_BACKWARD_DATA, p, dy, w, dx)
    }

    fn conv2d_backward_filter(
        &self,
        p: &Conv2dParams,
        x: &CpuBuffer,
        dy: &CpuBuffer,
        dw: &mut CpuBuffer,
    ) -> Result<()> {
        self.convolve(&CONV_BACKWARD_FILTER, p, x, dy, dw)
    }

    fn batch_norm_forward_train(
        &self,
        p: &BatchNormParams,
        x: &CpuBuffer,
        bn: &mut BatchNormBuffers<CpuBuffer>,
        saved: &mut BatchNormSaved<CpuBuffer>,
        y: &mut CpuBuffer,
    ) -> Result<()> {
        const OP: &str = "batch_norm_forward_train";
        p.validate(true)?;
        let c = p.channels;
        check(OP, "x", x, p.rows * c)?;
        check(OP, "y", y, p.rows * c)?;
        check_bn(OP, bn, c)?;
        check(OP, "saved mean", &saved.mean, c)?;
        check(OP, "saved inv_std", &saved.inv_std, c)?;
        batchnorm::forward_train(
            p,
            x.as_slice(),
            bn.gamma.as_slice(),
            bn.beta.as_slice(),
            batchnorm::TrainOutputs {
                running_mean: bn.running_mean.as_mut_slice(),
                running_var: bn.running_var.as_mut_slice(),
                saved_mean: saved.mean.as_mut_slice(),
                saved_inv_std: saved.inv_std.as_mut_slice(),
                y: y.as_mut_slice(),
            },
        );
        Ok(())
    }

    fn batch_norm_forward_eval(
        &self,
        p: &BatchNormParams,
        x: &CpuBuffer,
        bn: &BatchNormBuffers<CpuBuffer>,
        y: &mut CpuBuffer,
    ) -> Result<()> {
        const OP: &str = "batch_norm_forward_eval";
        p.validate(false)?;
        let c = p.channels;
        check(OP, "x", x, p.rows * c)?;
        check(OP, "y", y, p.rows * c)?;
        check_bn(OP, bn, c)?;
        batchnorm::forward_eval(
            p,
            x.as_slice(),
            bn.gamma.as_slice(),
            bn.beta.as_slice(),
            bn.running_mean.as_slice(),
            bn.running_var.as_slice(),
            y.as_mut_slice(),
        );
        Ok(())
    }

    fn batch_norm_backward(
        &self,
        p: &BatchNormParams,
        x: &CpuBuffer,
        dy: &CpuBuffer,
        gamma: &CpuBuffer,
        saved: &BatchNormSaved<CpuBuffer>,
        dx: &mut CpuBuffer,
        grads: &mut BatchNormGrads<CpuBuffer>,
    ) -> Result<()> {
        const OP: &str = "batch_norm_backward";
        p.validate(true)?;
        let c = p.channels;
        for (what, buf) in [("x", x), ("dy", dy)] {
            check(OP, what, buf, p.rows * c)?;
        }
        check(OP, "dx", dx, p.rows * c)?;
        for (what, buf) in [
            ("gamma", gamma),
            ("saved mean", &saved.mean),
            ("saved inv_std", &saved.inv_std),
        ] {
            check(OP, what, buf, c)?;
        }
        check(OP, "dgamma", &grads.gamma, c)?;
        check(OP, "dbeta", &grads.beta, c)?;
        batchnorm::backward(
            p,
            x.as_slice(),
            dy.as_slice(),
            gamma.as_slice(),
            saved.mean.as_slice(),
            saved.inv_std.as_slice(),
            batchnorm::BackwardOutputs {
                dx: dx.as_mut_slice(),
                dgamma: grads.gamma.as_mut_slice(),
                dbeta: grads.beta.as_mut_slice(),
            },
        );
        Ok(())
    }

    fn relu_forward(&self, x: &mut CpuBuffer) -> Result<()> {
        elementwise::relu_forward(x.as_mut_slice());
        Ok(())
    }

    fn relu_backward(&self, y: &CpuBuffer, dy: &mut CpuBuffer) -> Result<()> {
        check("relu_backward", "dy", dy, y.as_slice().len())?;
        elementwise::relu_backward(y.as_slice(), dy.as_mut_slice());
        Ok(())
    }

    fn max_pool_forward(&self, p: &PoolParams, x: &CpuBuffer, y: &mut CpuBuffer) -> Result<()> {
        const OP: &str = "max_pool_forward";
        p.validate()?;
        check(OP, "x", x, p.input_len())?;
        check(OP, "y", y, p.output_len())?;
        pool::max_forward(p, x.as_slice(), y.as_mut_slice());
        Ok(())
    }

    fn max_pool_backward(
        &self,
        p: &PoolParams,
        x: &CpuBuffer,
        dy: &CpuBuffer,
        dx: &mut CpuBuffer,
    ) -> Result<()> {
        const OP: &str = "max_pool_backward";
        p.validate()?;
        check(OP, "x", x, p.input_len())?;
        check(OP, "dy", dy, p.output_len())?;
        check(OP, "dx", dx, p.input_len())?;
        pool::max_backward(p, x.as_slice(), dy.as_slice(), dx.as_mut_slice());
        Ok(())
    }

    fn global_avg_pool_forward(
        &self,
        p: &GlobalPoolParams,
        x: &CpuBuffer,
        y: &mut CpuBuffer,
    ) -> Result<()> {
        const OP: &str = "global_avg_pool_forward";
        p.validate()?;
        check(OP, "x", x, p.batch * p.spatial * p.channels)?;
        check(OP, "y", y, p.batch * p.channels)?;
        pool::global_avg_forward(p, x.as_slice(), y.as_mut_slice());
        Ok(())
    }

    fn global_avg_pool_backward(
        &self,
        p: &GlobalPoolParams,
        dy: &CpuBuffer,
        dx: &mut CpuBuffer,
    ) -> Result<()> {
        const OP: &str = "global_avg_pool_backward";
        p.validate()?;
        check(OP, "dy", dy, p.batch * p.channels)?;
        check(OP, "dx", dx, p.batch * p.spatial * p.channels)?;
        pool::global_avg_backward(p, dy.as_slice(), dx.as_mut_slice());
        Ok(())
    }

    fn linear_forward(
        &self,
        p: &LinearParams,
        x: &CpuBuffer,
        w: &CpuBuffer,
        b: &CpuBuffer,
        y: &mut CpuBuffer,
    ) -> Result<()> {
        const OP: &str = "linear_forward";
        p.validate()?;
        check(OP, "x", x, p.batch * p.in_features)?;
        check(OP, "w", w, p.out_features * p.in_features)?;
        check(OP, "b", b, p.out_features)?;
        check(OP, "y", y, p.batch * p.out_features)?;
        linear::forward(
            p,
            self.threads(),
            x.as_slice(),
            w.as_slice(),
            b.as_slice(),
            y.as_mut_slice(),
        );
        Ok(())
    }

    fn linear_backward(
        &self,
        p: &LinearParams,
        x: &CpuBuffer,
        w: &CpuBuffer,
        dy: &CpuBuffer,
        dx: Option<&mut CpuBuffer>,
        dw: &mut CpuBuffer,
        db: &mut CpuBuffer,
    ) -> Result<()> {
        const OP: &str = "linear_backward";
        p.validate()?;
        check(OP, "x", x, p.batch * p.in_features)?;
        check(OP, "w", w, p.out_features * p.in_features)?;
        check(OP, "dy", dy, p.batch * p.out_features)?;
        check(OP, "dw", dw, p.out_features * p.in_features)?;
        check(OP, "db", db, p.out_features)?;
        if let Some(dx) = &dx {
            check(OP, "dx", dx, p.batch * p.in_features)?;
        }
        let grads = linear::Grads {
            dx: dx.map(|d| d.as_mut_slice()),
            dw: dw.as_mut_slice(),
            db: db.as_mut_slice(),
        };
        linear::backward(
            p,
            self.threads(),
            x.as_slice(),
            w.as_slice(),
            dy.as_slice(),
            grads,
        );
        Ok(())
    }

    fn cross_entropy_forward(
        &self,
        p: &CrossEntropyParams,
        logits: &CpuBuffer,
        labels: &CpuBuffer,
        loss: &mut CpuBuffer,
        correct: &mut CpuBuffer,
    ) -> Result<()> {
        const OP: &str = "cross_entropy_forward";
        p.validate()?;
        check(OP, "logits", logits, p.batch * p.classes)?;
        check(OP, "labels", labels, p.batch)?;
        check(OP, "loss", loss, 1)?;
        check(OP, "correct", correct, p.batch)?;
        let parsed = loss::parse_labels(p, labels.as_slice())?;
        loss.as_mut_slice()[0] =
            loss::forward(p, logits.as_slice(), &parsed, correct.as_mut_slice())?;
        Ok(())
    }

    fn cross_entropy_backward(
        &self,
        p: &CrossEntropyParams,
        logits: &CpuBuffer,
        labels: &CpuBuffer,
        dlogits: &mut CpuBuffer,
    ) -> Result<()> {
        const OP: &str = "cross_entropy_backward";
        p.validate()?;
        check(OP, "logits", logits, p.batch * p.classes)?;
        check(OP, "labels", labels, p.batch)?;
        check(OP, "dlogits", dlogits, p.batch * p.classes)?;
        let parsed = loss::parse_labels(p, labels.as_slice())?;
        loss::backward(p, logits.as_slice(), &parsed, dlogits.as_mut_slice())
    }

    fn add(&self, a: &CpuBuffer, b: &CpuBuffer, out: &mut CpuBuffer) -> Result<()> {
        check_same("add", a, b)?;
        check("add", "out", out, a.as_slice().len())?;
        elementwise::add(a.as_slice(), b.as_slice(), out.as_mut_slice());
        Ok(())
    }

    fn add_assign(&self, dst: &mut CpuBuffer, src: &CpuBuffer) -> Result<()> {
        check("add_assign", "src", src, dst.as_slice().len())?;
        elementwise::axpy(1.0, src.as_slice(), dst.as_mut_slice());
        Ok(())
    }

    fn scale(&self, x: &mut CpuBuffer, alpha: f32) -> Result<()> {
        elementwise::scale(x.as_mut_slice(), alpha);
        Ok(())
    }

    fn axpy(&self, alpha: f32, x: &CpuBuffer, y: &mut CpuBuffer) -> Result<()> {
        check("axpy", "y", y, x.as_slice().len())?;
        elementwise::axpy(alpha, x.as_slice(), y.as_mut_slice());
        Ok(())
    }

    fn sum_squares(&self, x: &CpuBuffer, out: &mut CpuBuffer, index: usize) -> Result<()> {
        let len = out.as_slice().len();
        let slot = out
            .as_mut_slice()
            .get_mut(index)
            .ok_or(EngineError::BufferLength {
                op: "sum_squares",
                what: "out (index past its end)",
                expected: index + 1,
                got: len,
            })?;
        *slot = elementwise::sum_squares(x.as_slice()) as f32;
        Ok(())
    }

    fn has_non_finite(&self, x: &CpuBuffer) -> Result<bool> {
        Ok(elementwise::has_non_finite(x.as_slice()))
    }
}

fn check_bn(op: &'static str, bn: &BatchNormBuffers<CpuBuffer>, c: usize) -> Result<()> {
    check(op, "gamma", &bn.gamma, c)?;
    check(op, "beta", &bn.beta, c)?;
    check(op, "running mean", &bn.running_mean, c)?;
    check(op, "running var", &bn.running_var, c)
}

#[cfg(test)]
pub(crate) mod tests;
