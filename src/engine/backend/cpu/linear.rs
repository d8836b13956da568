//! Fully connected layer: weights `[out, in]` (PyTorch order), bias `[out]`.

use super::gemm::{matmul, MatMut, MatRef};
use crate::engine::backend::LinearParams;

pub fn forward(p: &LinearParams, threads: usize, x: &[f32], w: &[f32], b: &[f32], y: &mut [f32]) {
    let (batch, fin, fout) = (p.batch, p.in_features, p.out_features);
    for row in y.chunks_exact_mut(fout) {
        row.copy_from_slice(b);
    }
    matmul(
        MatMut::row_major(y, batch, fout),
        MatRef::row_major(x, batch, fin),
        MatRef::row_major(w, fout, fin).t(),
        true,
        threads,
    );
}

pub struct Grads<'a> {
    pub dx: Option<&'a mut [f32]>,
    pub dw: &'a mut [f32],
    pub db: &'a mut [f32],
}

pub fn backward(
    p: &LinearParams,
    threads: usize,
    x: &[f32],
    w: &[f32],
    dy: &[f32],
    grads: Grads<'_>,
) {
    let (batch, fin, fout) = (p.batch, p.in_features, p.out_features);
    let dy_m = MatRef::row_major(dy, batch, fout);
    matmul(
        MatMut::row_major(grads.dw, fout, fin),
        dy_m.t(),
        MatRef::row_major(x, batch, fin),
        false,
        threads,
    );
    grads.db.fill(0.0);
    for row in dy.chunks_exact(fout) {
        grads.db.iter_mut().zip(row).for_each(|(d, g)| *d += g);
    }
    if let Some(dx) = grads.dx {
        matmul(
            MatMut::row_major(dx, batch, fin),
            dy_m,
            MatRef::row_major(w, fout, fin),
            false,
            threads,
        );
    }
}
