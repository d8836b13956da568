//! Element-wise ops and reductions, parallel over fixed-size chunks.

use rayon::prelude::*;

/// Elements per parallel chunk: big enough that scheduling costs vanish.
const CHUNK: usize = 1 << 14;

pub fn fill(x: &mut [f32], value: f32) {
    x.par_chunks_mut(CHUNK).for_each(|c| c.fill(value));
}

pub fn relu_forward(x: &mut [f32]) {
    x.par_chunks_mut(CHUNK)
        .for_each(|c| c.iter_mut().for_each(|v| *v = v.max(0.0)));
}

pub fn relu_backward(y: &[f32], dy: &mut [f32]) {
    dy.par_chunks_mut(CHUNK)
        .zip(y.par_chunks(CHUNK))
        .for_each(|(d, y)| {
            d.iter_mut()
                .zip(y)
                .for_each(|(d, &y)| *d = if y > 0.0 { *d } else { 0.0 });
        });
}

pub fn add(a: &[f32], b: &[f32], out: &mut [f32]) {
    out.par_chunks_mut(CHUNK)
        .zip(a.par_chunks(CHUNK).zip(b.par_chunks(CHUNK)))
        .for_each(|(o, (a, b))| {
            o.iter_mut()
                .zip(a.iter().zip(b))
                .for_each(|(o, (a, b))| *o = a + b);
        });
}

pub fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
    y.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(y, x)| y.iter_mut().zip(x).for_each(|(y, x)| *y += alpha * x));
}

pub fn scale(x: &mut [f32], alpha: f32) {
    x.par_chunks_mut(CHUNK)
        .for_each(|c| c.iter_mut().for_each(|v| *v *= alpha));
}

/// Σx² with f32 lanes inside a chunk and f64 across chunks.
pub fn sum_squares(x: &[f32]) -> f64 {
    x.par_chunks(CHUNK)
        .map(|c| {
            let mut lanes = [0.0f32; 16];
            let mut rest = c.chunks_exact(16);
            for block in &mut rest {
                for (l, v) in lanes.iter_mut().zip(block) {
                    *l += v * v;
                }
            }
            let tail: f32 = rest.remainder().iter().map(|v| v * v).sum();
            lanes.iter().map(|&l| l as f64).sum::<f64>() + tail as f64
        })
        .sum()
}

pub fn has_non_finite(x: &[f32]) -> bool {
    x.par_chunks(CHUNK)
        .any(|c| c.iter().fold(false, |bad, v| bad | !v.is_finite()))
}
