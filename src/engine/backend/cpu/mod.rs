//! The CPU backend: f32 buffers in host memory, multi-threaded on the rayon pool, GEMMs
//! through the `gemm` crate (AVX-512 kernels where the CPU has them).

mod batchnorm;
mod conv;
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

/// A buffer of f32 values in host memory.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CpuBuffer(Vec<f32>);

impl CpuBuffer {
    pub fn as_slice(&self) -> &[f32] {
        &self.0
    }
    pub fn as_mut_slice(&mut self) -> &mut [f32] {
        &mut self.0
    }
}

#[derive(Debug, Clone, Default)]
pub struct CpuBackend {
    tiling: conv::Tiling,
}

impl CpuBackend {
    pub fn new() -> Self {
        Self::default()
    }

    /// A backend whose convolutions use im2col tiles of exactly `rows` output rows, so
    /// tests can exercise tiles that straddle rows and images on tiny shapes.
    pub fn with_conv_tile_rows(rows: usize) -> Self {
        CpuBackend {
            tiling: conv::Tiling {
                fixed_rows: Some(rows.max(1)),
            },
        }
    }

    /// Threads the backend's parallel loops use: the size of the current rayon pool.
    pub fn threads(&self) -> usize {
        rayon::current_num_threads().max(1)
    }
}

fn check(op: &'static str, what: &'static str, buf: &CpuBuffer, expected: usize) -> Result<()> {
    if buf.0.len() == expected {
        Ok(())
    } else {
        Err(EngineError::BufferLength {
            op,
            what,
            expected,
            got: buf.0.len(),
        })
    }
}

fn check_same(op: &'static str, a: &CpuBuffer, b: &CpuBuffer) -> Result<()> {
    check(op, "second operand", b, a.0.len())
}

impl Backend for CpuBackend {
    type Buffer = CpuBuffer;

    fn name(&self) -> String {
        "cpu".into()
    }

    fn zeros(&self, len: usize) -> Result<CpuBuffer> {
        Ok(CpuBuffer(vec![0.0; len]))
    }

    fn upload(&self, host: &[f32]) -> Result<CpuBuffer> {
        Ok(CpuBuffer(host.to_vec()))
    }

    fn download(&self, buf: &CpuBuffer, host: &mut [f32]) -> Result<()> {
        if host.len() != buf.0.len() {
            return Err(EngineError::BufferLength {
                op: "download",
                what: "host destination",
                expected: buf.0.len(),
                got: host.len(),
            });
        }
        host.copy_from_slice(&buf.0);
        Ok(())
    }

    fn buffer_len(&self, buf: &CpuBuffer) -> usize {
        buf.0.len()
    }

    fn copy(&self, src: &CpuBuffer, dst: &mut CpuBuffer) -> Result<()> {
        check("copy", "destination", dst, src.0.len())?;
        dst.0.copy_from_slice(&src.0);
        Ok(())
    }

    fn fill(&self, buf: &mut CpuBuffer, value: f32) -> Result<()> {
        buf.0.fill(value);
        Ok(())
    }

    fn conv2d_forward(
        &self,
        p: &Conv2dParams,
        x: &CpuBuffer,
        w: &CpuBuffer,
        y: &mut CpuBuffer,
    ) -> Result<()> {
        const OP: &str = "conv2d_forward";
        p.validate()?;
        check(OP, "x", x, p.input_len())?;
        check(OP, "w", w, p.weight_len())?;
        check(OP, "y", y, p.output_len())?;
        conv::forward(p, self.tiling, &x.0, &w.0, &mut y.0);
        Ok(())
    }

    fn conv2d_backward_data(
        &self,
        p: &Conv2dParams,
        dy: &CpuBuffer,
        w: &CpuBuffer,
        dx: &mut CpuBuffer,
    ) -> Result<()> {
        const OP: &str = "conv2d_backward_data";
        p.validate()?;
        check(OP, "dy", dy, p.output_len())?;
        check(OP, "w", w, p.weight_len())?;
        check(OP, "dx", dx, p.input_len())?;
        conv::backward_data(p, self.tiling, &dy.0, &w.0, &mut dx.0);
        Ok(())
    }

    fn conv2d_backward_filter(
        &self,
        p: &Conv2dParams,
        x: &CpuBuffer,
        dy: &CpuBuffer,
        dw: &mut CpuBuffer,
    ) -> Result<()> {
        const OP: &str = "conv2d_backward_filter";
        p.validate()?;
        check(OP, "x", x, p.input_len())?;
        check(OP, "dy", dy, p.output_len())?;
        check(OP, "dw", dw, p.weight_len())?;
        conv::backward_filter(p, self.tiling, &x.0, &dy.0, &mut dw.0);
        Ok(())
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
            &x.0,
            &bn.gamma.0,
            &bn.beta.0,
            batchnorm::TrainOutputs {
                running_mean: &mut bn.running_mean.0,
                running_var: &mut bn.running_var.0,
                saved_mean: &mut saved.mean.0,
                saved_inv_std: &mut saved.inv_std.0,
                y: &mut y.0,
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
            &x.0,
            &bn.gamma.0,
            &bn.beta.0,
            &bn.running_mean.0,
            &bn.running_var.0,
            &mut y.0,
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
            &x.0,
            &dy.0,
            &gamma.0,
            &saved.mean.0,
            &saved.inv_std.0,
            batchnorm::BackwardOutputs {
                dx: &mut dx.0,
                dgamma: &mut grads.gamma.0,
                dbeta: &mut grads.beta.0,
            },
        );
        Ok(())
    }

    fn relu_forward(&self, x: &mut CpuBuffer) -> Result<()> {
        elementwise::relu_forward(&mut x.0);
        Ok(())
    }

    fn relu_backward(&self, y: &CpuBuffer, dy: &mut CpuBuffer) -> Result<()> {
        check("relu_backward", "dy", dy, y.0.len())?;
        elementwise::relu_backward(&y.0, &mut dy.0);
        Ok(())
    }

    fn max_pool_forward(&self, p: &PoolParams, x: &CpuBuffer, y: &mut CpuBuffer) -> Result<()> {
        const OP: &str = "max_pool_forward";
        p.validate()?;
        check(OP, "x", x, p.input_len())?;
        check(OP, "y", y, p.output_len())?;
        pool::max_forward(p, &x.0, &mut y.0);
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
        pool::max_backward(p, &x.0, &dy.0, &mut dx.0);
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
        pool::global_avg_forward(p, &x.0, &mut y.0);
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
        pool::global_avg_backward(p, &dy.0, &mut dx.0);
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
        linear::forward(p, self.threads(), &x.0, &w.0, &b.0, &mut y.0);
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
            dx: dx.map(|d| d.0.as_mut_slice()),
            dw: &mut dw.0,
            db: &mut db.0,
        };
        linear::backward(p, self.threads(), &x.0, &w.0, &dy.0, grads);
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
        let parsed = loss::parse_labels(p, &labels.0)?;
        loss.0[0] = loss::forward(p, &logits.0, &parsed, &mut correct.0)?;
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
        let parsed = loss::parse_labels(p, &labels.0)?;
        loss::backward(p, &logits.0, &parsed, &mut dlogits.0)
    }

    fn add(&self, a: &CpuBuffer, b: &CpuBuffer, out: &mut CpuBuffer) -> Result<()> {
        check_same("add", a, b)?;
        check("add", "out", out, a.0.len())?;
        elementwise::add(&a.0, &b.0, &mut out.0);
        Ok(())
    }

    fn add_assign(&self, dst: &mut CpuBuffer, src: &CpuBuffer) -> Result<()> {
        check("add_assign", "src", src, dst.0.len())?;
        elementwise::axpy(1.0, &src.0, &mut dst.0);
        Ok(())
    }

    fn scale(&self, x: &mut CpuBuffer, alpha: f32) -> Result<()> {
        elementwise::scale(&mut x.0, alpha);
        Ok(())
    }

    fn axpy(&self, alpha: f32, x: &CpuBuffer, y: &mut CpuBuffer) -> Result<()> {
        check("axpy", "y", y, x.0.len())?;
        elementwise::axpy(alpha, &x.0, &mut y.0);
        Ok(())
    }

    fn sum_squares(&self, x: &CpuBuffer, out: &mut CpuBuffer, index: usize) -> Result<()> {
        let len = out.0.len();
        let slot = out.0.get_mut(index).ok_or(EngineError::BufferLength {
            op: "sum_squares",
            what: "out (index past its end)",
            expected: index + 1,
            got: len,
        })?;
        *slot = elementwise::sum_squares(&x.0) as f32;
        Ok(())
    }

    fn has_non_finite(&self, x: &CpuBuffer) -> Result<bool> {
        Ok(elementwise::has_non_finite(&x.0))
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
