//! Batch norm over `[rows, channels]` (NHWC flattened), statistics accumulated in f64 per
//! row chunk in parallel and then reduced.

use rayon::prelude::*;

use crate::engine::backend::BatchNormParams;

/// Rows per parallel chunk: large enough to amortise the per-chunk partial sums.
const CHUNK_ROWS: usize = 512;

/// Per-channel Σa and Σa·b over all rows, each chunk reduced separately then summed.
fn channel_sums(
    channels: usize,
    a: &[f32],
    b: Option<&[f32]>,
    shift: Option<&[f32]>,
) -> (Vec<f64>, Vec<f64>) {
    let chunk = CHUNK_ROWS * channels;
    let partials: Vec<(Vec<f64>, Vec<f64>)> = a
        .par_chunks(chunk)
        .enumerate()
        .map(|(i, a_chunk)| {
            let mut sum = vec![0.0f64; channels];
            let mut prod = vec![0.0f64; channels];
            let b_chunk = b.map(|b| &b[i * chunk..i * chunk + a_chunk.len()]);
            for (r, a_row) in a_chunk.chunks_exact(channels).enumerate() {
                let b_row = b_chunk.map_or(a_row, |b| &b[r * channels..(r + 1) * channels]);
                for c in 0..channels {
                    let av = a_row[c] as f64;
                    let bv = b_row[c] as f64 - shift.map_or(0.0, |s| s[c] as f64);
                    sum[c] += av;
                    prod[c] += av * bv;
                }
            }
            (sum, prod)
        })
        .collect();
    let mut sum = vec![0.0f64; channels];
    let mut prod = vec![0.0f64; channels];
    for (s, p) in partials {
        sum.iter_mut().zip(s).for_each(|(a, b)| *a += b);
        prod.iter_mut().zip(p).for_each(|(a, b)| *a += b);
    }
    (sum, prod)
}

/// y := x·scale[c] + shift[c], in parallel over row chunks.
fn affine(channels: usize, x: &[f32], scale: &[f32], shift: &[f32], y: &mut [f32]) {
    let chunk = CHUNK_ROWS * channels;
    y.par_chunks_mut(chunk)
        .zip(x.par_chunks(chunk))
        .for_each(|(y_chunk, x_chunk)| {
            for (y_row, x_row) in y_chunk
                .chunks_exact_mut(channels)
                .zip(x_chunk.chunks_exact(channels))
            {
                for c in 0..channels {
                    y_row[c] = x_row[c] * scale[c] + shift[c];
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
    // Σx and Σx² about zero in f64 are exact enough for f32 activations.
    let (sum, sum_sq) = channel_sums(channels, x, None, None);
    let momentum = p.momentum as f64;
    let mut scale = vec![0.0f32; channels];
    let mut shift = vec![0.0f32; channels];
    for c in 0..channels {
        let mean = sum[c] / rows;
        let var = (sum_sq[c] / rows - mean * mean).max(0.0);
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
    let (sum_dy, sum_dy_xc) = channel_sums(channels, dy, Some(x), Some(saved_mean));
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
            for ((dx_row, x_row), dy_row) in dx_chunk
                .chunks_exact_mut(channels)
                .zip(x_chunk.chunks_exact(channels))
                .zip(dy_chunk.chunks_exact(channels))
            {
                for c in 0..channels {
                    dx_row[c] = x_row[c] * a[c] + dy_row[c] * g[c] + b[c];
                }
            }
        });
}
