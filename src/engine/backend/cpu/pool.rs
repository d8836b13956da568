//! Max pooling (argmax recomputed in the backward, so no index buffer is kept) and global
//! average pooling, NHWC.

use rayon::prelude::*;

use crate::engine::backend::{GlobalPoolParams, PoolParams};

/// The input rows and columns of window (oh, ow) that lie inside the image.
fn window(
    p: &PoolParams,
    oh: usize,
    ow: usize,
) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
    let clip = |o: usize, extent: usize| {
        let start = (o * p.stride) as isize - p.padding as isize;
        let lo = start.max(0) as usize;
        let hi = ((start + p.kernel as isize).max(0) as usize).min(extent);
        lo..hi
    };
    (clip(oh, p.in_h), clip(ow, p.in_w))
}

pub fn max_forward(p: &PoolParams, x: &[f32], y: &mut [f32]) {
    let (oh_n, ow_n, c_n) = (p.out_h(), p.out_w(), p.channels);
    let image_len = p.in_h * p.in_w * c_n;
    y.par_chunks_mut(ow_n * c_n)
        .enumerate()
        .for_each(|(row, y_row)| {
            let n = row / oh_n;
            let oh = row % oh_n;
            let image = &x[n * image_len..(n + 1) * image_len];
            for ow in 0..ow_n {
                let out = &mut y_row[ow * c_n..(ow + 1) * c_n];
                out.fill(f32::NEG_INFINITY);
                let (rows, cols) = window(p, oh, ow);
                for ih in rows {
                    for iw in cols.clone() {
                        let src = &image[(ih * p.in_w + iw) * c_n..(ih * p.in_w + iw + 1) * c_n];
                        for (o, &v) in out.iter_mut().zip(src) {
                            // NaN propagates, as it does in PyTorch.
                            if v > *o || v.is_nan() {
                                *o = v;
                            }
                        }
                    }
                }
            }
        });
}

pub fn max_backward(p: &PoolParams, x: &[f32], dy: &[f32], dx: &mut [f32]) {
    let (oh_n, ow_n, c_n) = (p.out_h(), p.out_w(), p.channels);
    let image_len = p.in_h * p.in_w * c_n;
    let out_image_len = oh_n * ow_n * c_n;
    // Windows overlap, so each image's gradient is owned by one task.
    dx.par_chunks_mut(image_len)
        .enumerate()
        .for_each(|(n, dx_image)| {
            dx_image.fill(0.0);
            let image = &x[n * image_len..(n + 1) * image_len];
            let dy_image = &dy[n * out_image_len..(n + 1) * out_image_len];
            let mut best = vec![0.0f32; c_n];
            let mut best_at = vec![0usize; c_n];
            for oh in 0..oh_n {
                for ow in 0..ow_n {
                    best.fill(f32::NEG_INFINITY);
                    best_at.fill(usize::MAX);
                    let (rows, cols) = window(p, oh, ow);
                    for ih in rows {
                        for iw in cols.clone() {
                            let base = (ih * p.in_w + iw) * c_n;
                            for c in 0..c_n {
                                let v = image[base + c];
                                if v > best[c] || best_at[c] == usize::MAX {
                                    best[c] = v;
                                    best_at[c] = base + c;
                                }
                            }
                        }
                    }
                    let g = &dy_image[(oh * ow_n + ow) * c_n..(oh * ow_n + ow + 1) * c_n];
                    for c in 0..c_n {
                        dx_image[best_at[c]] += g[c];
                    }
                }
            }
        });
}

pub fn global_avg_forward(p: &GlobalPoolParams, x: &[f32], y: &mut [f32]) {
    let (hw, c_n) = (p.spatial, p.channels);
    let inv = 1.0 / hw as f32;
    y.par_chunks_mut(c_n).enumerate().for_each(|(n, y_row)| {
        y_row.fill(0.0);
        for pixel in x[n * hw * c_n..(n + 1) * hw * c_n].chunks_exact(c_n) {
            y_row.iter_mut().zip(pixel).for_each(|(a, b)| *a += b);
        }
        y_row.iter_mut().for_each(|v| *v *= inv);
    });
}

pub fn global_avg_backward(p: &GlobalPoolParams, dy: &[f32], dx: &mut [f32]) {
    let (hw, c_n) = (p.spatial, p.channels);
    let inv = 1.0 / hw as f32;
    dx.par_chunks_mut(hw * c_n)
        .enumerate()
        .for_each(|(n, dx_image)| {
            let g = &dy[n * c_n..(n + 1) * c_n];
            for pixel in dx_image.chunks_exact_mut(c_n) {
                pixel.iter_mut().zip(g).for_each(|(d, s)| *d = s * inv);
            }
        });
}
