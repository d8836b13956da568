//! Batch norm over `[rows, channels]` (NHWC flattened), statistics accumulated in f64 per
//! row chunk in parallel and then reduced.

use rayon::prelude::*;

use super::batchnorm_avx512::{self as avx512, Sums};
use crate::engine::backend::BatchNormParams;

/// Rows per parallel chunk: large enough to amortise the per-chunk partial sums.
const CHUNK_ROWS: usize = 512;

/// Rows summed in f32 before they are flushed into f64: short enough that f32 rounding
/// stays near 1e-6 relative, long enough that the inner loop runs on vector registers.
const BLOCK_ROWS: usize = 64;

/// Per-channel `Σ g(a, b)` and `Σ h(a, b)` over all rows, in blocks of f32 partial sums
/// reduced in f64, chunks in parallel. `step` is the portable form of the sums `kind`
/// with `centre` names, which the AVX-512 loop computes where it can.
fn channel_sums(
    channels: usize,
    a: &[f32],
    b: &[f32],
    (kind, centre): (Sums, &[f32]),
    step: impl Fn(&mut [f32], &mut [f32], &[f32], &[f32]) + Sync,
) -> (Vec<f64>, Vec<f64>) {
    let chunk = CHUNK_ROWS * channels;
    let partials: Vec<(Vec<f64>, Vec<f64>)> = a
        .par_chunks(chunk)
        .zip(b.par_chunks(chunk))
        .map(|(a_chunk, b_chunk)| {
            let mut total1 = vec![0.0f64; channels];
            let mut total2 = vec![0.0f64; channels];
            if avx512::channel_sums(
                kind,
                channels,
                BLOCK_ROWS,
                a_chunk,
                b_chunk,
                centre,
                &mut total1,
                &mut total2,
            ) {
                return (total1, total2);
            }
            let mut block1 = vec![0.0f32; channels];
            let mut block2 = vec![0.0f32; channels];
            let block = BLOCK_ROWS * channels;
            for (a_block, b_block) in a_chunk.chunks(block).zip(b_chunk.chunks(block)) {
                block1.fill(0.0);
                block2.fill(0.0);
                for (a_row, b_row) in a_block
                    .chunks_exact(channels)
                    .zip(b_block.chunks_exact(channels))
                {
                    step(&mut block1, &mut block2, a_row, b_row);
                }
                total1
                    .iter_mut()
                    .zip(&block1)
                    .for_each(|(t, &v)| *t += v as f64);
                total2
                    .iter_mut()
                    .zip(&block2)
                    .for_each(|(t, &v)| *t += v as f64);
            }
            (total1, total2)
        })
        .collect();
    let mut sum1 = vec![0.0f64; channels];
    let mut sum2 = vec![0.0f64; channels];
    for (s1, s2) in partials {
        sum1.iter_mut().zip(s1).for_each(|(a, b)| *a += b);
        sum2.iter_mut().zip(s2).for_each(|(a, b)| *a += b);
    }
    (sum1, sum2)
}

/// y := x·scale[c] + shift[c], in parallel over row chunks.
fn affine(channels: usize, x: &[f32], scale: &[f32], shift: &[f32], y: &mut [f32]) {
    let chunk = CHUNK_ROWS * channels;
    y.par_chunks_mut(chunk)
        .zip(x.par_chunks(chunk))
        .for_each(|(y_chunk, x_chunk)| {
            if avx512::affine(channels, x_chunk, scale, shift, y_chunk) {
                return;
            }
            for (y_row, x_row) in y_chunk
                .chunks_exact_mut(channels)
                .zip(x_chunk.chunks_exact(channels))
            {
                for (((y, &x), &a), &b) in y_row.iter_mut().zip(x_row).zip(scale).zip(shift) {
                    *y = x * a + b;
                }
            }
        });
}

pub struct TrainOutputs<'a> {
    pub running_mean: &'a mut [f32],
    pub running_var: &'a mut [f32],
    pub saved_mean: &'a mut [f32],
    pub saved_inv_std: &'a mut [f32],
    pub y: &'a mut [f32],
}

pub fn forward_train(
    p: &BatchNormParams,
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    out: TrainOutputs<'_>,
) {
    let (rows, channels) = (p.rows as f64, p.channels);
    // Sums of d = x − pivot with the first row as pivot: close to the mean, so
    // E[d²] − E[d]² does not cancel away the variance.
    let pivot = &x[..channels];
    let (sum_d, sum_d2) = channel_sums(
        channels,
        x,
        x,
        (Sums::Centred, pivot),
        |s1, s2, x_row, _| {
            for (((s1, s2), &v), &c) in s1.iter_mut().zip(s2.iter_mut()).zip(x_row).zip(pivot) {
                let d = v - c;
                *s1 += d;
                *s2 += d * d;
            }
        },
    );
    let momentum = p.momentum as f64;
    let mut scale = vec![0.0f32; channels];
    let mut shift = vec![0.0f32; channels];
    for c in 0..channels {
        let mean_d = sum_d[c] / rows;
        let var = (sum_d2[c] / rows - mean_d * mean_d).max(0.0);
        let mean = pivot[c] as f64 + mean_d;
        let inv_std = 1.0 / (var + p.eps as f64).sqrt();
        out.saved_mean[c] = mean as f32;
        out.saved_inv_std[c] = inv_std as f32;
        scale[c] = (gamma[c] as f64 * inv_std) as f32;
        shift[c] = (beta[c] as f64 - mean * gamma[c] as f64 * inv_std) as f32;
        let unbiased = var * rows / (rows - 1.0);
        out.running_mean[c] =
            ((1.0 - momentum) * out.running_mean[c] as f64 + momentum * mean) as f32;
        out.running_var[c] =
            ((1.0 - momentum) * out.running_var[c] as f64 + momentum * unbiased) as f32;
    }
    affine(channels, x, &scale, &shift, out.y);
}

#[allow(clippy::too_many_arguments)]
pub fn forward_eval(
    p: &BatchNormParams,
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    running_mean: &[f32],
    running_var: &[f32],
    y: &mut [f32],
) {
    let channels = p.channels;
    let mut scale = vec![0.0f32; channels];
    let mut shift = vec![0.0f32; channels];
    for c in 0..channels {
        let inv_std = 1.0 / (running_var[c] as f64 + p.eps as f64).sqrt();
        scale[c] = (gamma[c] as f64 * inv_std) as f32;
        shift[c] = (beta[c] as f64 - running_mean[c] as f64 * gamma[c] as f64 * inv_std) as f32;
    }
    affine(channels, x, &scale, &shift, y);
}

pub struct BackwardOutputs<'a> {
    pub dx: &'a mut [f32],
    pub dgamma: &'a mut [f32],
    pub dbeta: &'a mut [f32],
}

/// dβ = Σdy, dγ = Σdy·x̂, dx = γ·inv_std·(dy − dβ/M − x̂·dγ/M).
#[allow(clippy::too_many_arguments)]
pub fn backward(
    p: &BatchNormParams,
    x: &[f32],
    dy: &[f32],
    gamma: &[f32],
    saved_mean: &[f32],
    saved_inv_std: &[f32],
    out: BackwardOutputs<'_>,
) {
    let (rows, channels) = (p.rows as f64, p.channels);
    let (sum_dy, sum_dy_xc) = channel_sums(
        channels,
        dy,
        x,
        (Sums::Gradient, saved_mean),
        |s1, s2, dy_row, x_row| {
            for ((((s1, s2), &g), &v), &m) in s1
                .iter_mut()
                .zip(s2.iter_mut())
                .zip(dy_row)
                .zip(x_row)
                .zip(saved_mean)
            {
                *s1 += g;
                *s2 += g * (v - m);
            }
        },
    );
    // dx = x·a + dy·g + b per channel, folded so the second pass is one FMA chain.
    let mut g = vec![0.0f32; channels];
    let mut a = vec![0.0f32; channels];
    let mut b = vec![0.0f32; channels];
    for c in 0..channels {
        let inv_std = saved_inv_std[c] as f64;
        let dbeta = sum_dy[c];
        let dgamma = sum_dy_xc[c] * inv_std;
        out.dbeta[c] = dbeta as f32;
        out.dgamma[c] = dgamma as f32;
        let k = gamma[c] as f64 * inv_std;
        g[c] = k as f32;
        // x̂·dγ/M = (x − mean)·inv_std·dγ/M
        let xa = -k * inv_std * dgamma / rows;
        a[c] = xa as f32;
        b[c] = (-k * dbeta / rows - xa * saved_mean[c] as f64) as f32;
    }
    let chunk = CHUNK_ROWS * channels;
    out.dx
        .par_chunks_mut(chunk)
        .zip(x.par_chunks(chunk).zip(dy.par_chunks(chunk)))
        .for_each(|(dx_chunk, (x_chunk, dy_chunk))| {
            if avx512::backward_dx(channels, x_chunk, dy_chunk, &a, &g, &b, dx_chunk) {
                return;
            }
            for ((dx_row, x_row), dy_row) in dx_chunk
                .chunks_exact_mut(channels)
                .zip(x_chunk.chunks_exact(channels))
                .zip(dy_chunk.chunks_exact(channels))
            {
                for ((((dx, &xv), &gv), (&ac, &gc)), &bc) in dx_row
                    .iter_mut()
                    .zip(x_row)
                    .zip(dy_row)
                    .zip(a.iter().zip(&g))
                    .zip(&b)
                {
                    *dx = xv * ac + gv * gc + bc;
                }
            }
        });
}
