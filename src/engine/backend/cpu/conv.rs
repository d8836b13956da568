//! Convolutions in NHWC with HWIO weights, as GEMMs.
//!
//! A 1×1 stride-1 convolution is one GEMM `x[N·H·W, Cin] × W[Cin, Cout]`. Every other
//! shape goes through im2col one tile of output rows at a time into per-thread scratch,
//! so scratch memory stays bounded by the tile size instead of growing with the batch.
//! Tiles run in parallel on the rayon pool, each tile's GEMM on one thread.

use rayon::prelude::*;

use super::gemm::{matmul, MatMut, MatRef};
use super::scratch::with_scratch;
use crate::engine::backend::Conv2dParams;

/// How many output rows one im2col tile holds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tiling {
    /// Fixed tile height, or `None` to size tiles from the GEMM depth.
    pub fixed_rows: Option<usize>,
}

impl Tiling {
    /// Rows per tile for a GEMM of depth `k`: about `target_elems` of im2col data, but
    /// enough tiles to keep every thread busy.
    fn rows(&self, k: usize, total_rows: usize, target_elems: usize, min_rows: usize) -> usize {
        if let Some(rows) = self.fixed_rows {
            return rows.max(1);
        }
        let by_size = (target_elems / k.max(1)).max(min_rows);
        let threads = rayon::current_num_threads().max(1);
        let by_balance = total_rows.div_ceil(4 * threads).max(min_rows);
        by_size.min(by_balance).max(1)
    }
}

/// Forward: the tile size keeps the im2col tile in L2 while the GEMM stays tall enough.
const FORWARD_TILE_ELEMS: usize = 1 << 17;
/// Filter gradients reduce over rows: deeper tiles mean fewer passes over dW.
const FILTER_TILE_ELEMS: usize = 1 << 20;

fn kdim(p: &Conv2dParams) -> usize {
    p.kernel_h * p.kernel_w * p.in_c
}

fn out_rows(p: &Conv2dParams) -> usize {
    p.batch * p.out_h() * p.out_w()
}

/// Writes the im2col rows `first_row..first_row+rows` (global output-pixel indices) into
/// `col`, row-major `[rows, KH·KW·Cin]` with (kh, kw, ci) ordering, zeros for padding.
fn im2col(p: &Conv2dParams, x: &[f32], first_row: usize, rows: usize, col: &mut [f32]) {
    let (oh_n, ow_n) = (p.out_h(), p.out_w());
    let k = kdim(p);
    let cin = p.in_c;
    let image_len = p.in_h * p.in_w * cin;
    for r in 0..rows {
        let g = first_row + r;
        let n = g / (oh_n * ow_n);
        let oh = (g / ow_n) % oh_n;
        let ow = g % ow_n;
        let dst_row = &mut col[r * k..(r + 1) * k];
        let image = &x[n * image_len..(n + 1) * image_len];
        let (kw_lo, kw_hi, iw_lo) = valid_kw(p, ow);
        for kh in 0..p.kernel_h {
            let seg = &mut dst_row[kh * p.kernel_w * cin..(kh + 1) * p.kernel_w * cin];
            let ih = (oh * p.stride + kh) as isize - p.padding as isize;
            if ih < 0 || ih >= p.in_h as isize || kw_lo >= kw_hi {
                seg.fill(0.0);
                continue;
            }
            seg[..kw_lo * cin].fill(0.0);
            seg[kw_hi * cin..].fill(0.0);
            // Consecutive kw read consecutive iw: the valid part is one contiguous run.
            let src = (ih as usize * p.in_w + iw_lo) * cin;
            seg[kw_lo * cin..kw_hi * cin].copy_from_slice(&image[src..src + (kw_hi - kw_lo) * cin]);
        }
    }
}

/// The kernel columns `kw_lo..kw_hi` that land inside the input for output column `ow`,
/// and the input column of `kw_lo`.
fn valid_kw(p: &Conv2dParams, ow: usize) -> (usize, usize, usize) {
    let start = (ow * p.stride) as isize - p.padding as isize;
    let kw_lo = (-start).max(0) as usize;
    let kw_hi = ((p.in_w as isize - start).max(0) as usize).min(p.kernel_w);
    let iw_lo = (start + kw_lo as isize).max(0) as usize;
    (kw_lo, kw_hi.max(kw_lo), iw_lo)
}

/// Adds the im2col-shaped gradient rows of one image back onto that image's input
/// gradient (the adjoint of [`im2col`]). `first_row` counts from the image's start.
fn col2im_add(p: &Conv2dParams, dcol: &[f32], first_row: usize, rows: usize, dx_image: &mut [f32]) {
    let ow_n = p.out_w();
    let k = kdim(p);
    let cin = p.in_c;
    for r in 0..rows {
        let g = first_row + r;
        let oh = g / ow_n;
        let ow = g % ow_n;
        let src_row = &dcol[r * k..(r + 1) * k];
        let (kw_lo, kw_hi, iw_lo) = valid_kw(p, ow);
        if kw_lo >= kw_hi {
            continue;
        }
        for kh in 0..p.kernel_h {
            let ih = (oh * p.stride + kh) as isize - p.padding as isize;
            if ih < 0 || ih >= p.in_h as isize {
                continue;
            }
            let seg = &src_row[(kh * p.kernel_w + kw_lo) * cin..(kh * p.kernel_w + kw_hi) * cin];
            let dst = (ih as usize * p.in_w + iw_lo) * cin;
            for (d, s) in dx_image[dst..dst + seg.len()].iter_mut().zip(seg) {
                *d += s;
            }
        }
    }
}

/// `y := conv(x, w)`; all lengths already validated.
pub fn forward(p: &Conv2dParams, tiling: Tiling, x: &[f32], w: &[f32], y: &mut [f32]) {
    let (m, k, cout) = (out_rows(p), kdim(p), p.out_c);
    let weights = MatRef::row_major(w, k, cout);
    let tile = tiling.rows(k, m, FORWARD_TILE_ELEMS, 64);
    if p.is_pointwise() {
        y.par_chunks_mut(tile * cout)
            .zip(x.par_chunks(tile * k))
            .for_each(|(y_tile, x_tile)| {
                let rows = y_tile.len() / cout;
                matmul(
                    MatMut::row_major(y_tile, rows, cout),
                    MatRef::row_major(x_tile, rows, k),
                    weights,
                    false,
                    1,
                );
            });
        return;
    }
    y.par_chunks_mut(tile * cout)
        .enumerate()
        .for_each(|(t, y_tile)| {
            let rows = y_tile.len() / cout;
            with_scratch(rows * k, |col| {
                im2col(p, x, t * tile, rows, col);
                matmul(
                    MatMut::row_major(y_tile, rows, cout),
                    MatRef::row_major(col, rows, k),
                    weights,
                    false,
                    1,
                );
            });
        });
}

/// `dx := convᵀ(dy, w)`; all lengths already validated.
pub fn backward_data(p: &Conv2dParams, tiling: Tiling, dy: &[f32], w: &[f32], dx: &mut [f32]) {
    let (m, k, cout) = (out_rows(p), kdim(p), p.out_c);
    let weights_t = MatRef::row_major(w, k, cout).t();
    if p.is_pointwise() {
        let tile = tiling.rows(k, m, FORWARD_TILE_ELEMS, 64);
        dx.par_chunks_mut(tile * k)
            .zip(dy.par_chunks(tile * cout))
            .for_each(|(dx_tile, dy_tile)| {
                let rows = dy_tile.len() / cout;
                matmul(
                    MatMut::row_major(dx_tile, rows, k),
                    MatRef::row_major(dy_tile, rows, cout),
                    weights_t,
                    false,
                    1,
                );
            });
        return;
    }
    // Windows overlap inside an image, so each image's gradient belongs to one task.
    let rows_per_image = p.out_h() * p.out_w();
    let tile = tiling.rows(k, rows_per_image, FORWARD_TILE_ELEMS, 64);
    let image_len = p.in_h * p.in_w * p.in_c;
    dx.par_chunks_mut(image_len)
        .enumerate()
        .for_each(|(n, dx_image)| {
            dx_image.fill(0.0);
            let dy_image = &dy[n * rows_per_image * cout..(n + 1) * rows_per_image * cout];
            let mut first = 0;
            while first < rows_per_image {
                let rows = tile.min(rows_per_image - first);
                with_scratch(rows * k, |dcol| {
                    matmul(
                        MatMut::row_major(dcol, rows, k),
                        MatRef::row_major(
                            &dy_image[first * cout..(first + rows) * cout],
                            rows,
                            cout,
                        ),
                        weights_t,
                        false,
                        1,
                    );
                    col2im_add(p, dcol, first, rows, dx_image);
                });
                first += rows;
            }
        });
}

/// `dw := Σ im2col(x)ᵀ · dy`; all lengths already validated. Each thread reduces a
/// contiguous share of the rows into its own partial sum, then the partials are added.
pub fn backward_filter(p: &Conv2dParams, tiling: Tiling, x: &[f32], dy: &[f32], dw: &mut [f32]) {
    let (m, k, cout) = (out_rows(p), kdim(p), p.out_c);
    let threads = rayon::current_num_threads().max(1);
    let shares = threads.min(m).max(1);
    let share_rows = m.div_ceil(shares);
    let tile = if p.is_pointwise() {
        share_rows
    } else {
        tiling.rows(k, m, FILTER_TILE_ELEMS, 256)
    };
    let mut partials: Vec<Vec<f32>> = (1..shares).map(|_| vec![0.0; k * cout]).collect();
    let mut targets: Vec<&mut [f32]> = Vec::with_capacity(shares);
    targets.push(&mut *dw);
    targets.extend(partials.iter_mut().map(|v| v.as_mut_slice()));
    targets.into_par_iter().enumerate().for_each(|(s, target)| {
        let start = s * share_rows;
        let end = ((s + 1) * share_rows).min(m);
        if start >= end {
            target.fill(0.0);
            return;
        }
        let mut first = start;
        while first < end {
            let rows = tile.min(end - first);
            let dy_tile = MatRef::row_major(&dy[first * cout..(first + rows) * cout], rows, cout);
            let accumulate = first != start;
            if p.is_pointwise() {
                let x_tile = MatRef::row_major(&x[first * k..(first + rows) * k], rows, k);
                matmul(
                    MatMut::row_major(target, k, cout),
                    x_tile.t(),
                    dy_tile,
                    accumulate,
                    1,
                );
            } else {
                with_scratch(rows * k, |col| {
                    im2col(p, x, first, rows, col);
                    matmul(
                        MatMut::row_major(target, k, cout),
                        MatRef::row_major(col, rows, k).t(),
                        dy_tile,
                        accumulate,
                        1,
                    );
                });
            }
            first += rows;
        }
    });
    if let Some((head, rest)) = partials.split_first_mut() {
        for part in rest {
            head.iter_mut().zip(part.iter()).for_each(|(a, b)| *a += b);
        }
        dw.par_iter_mut()
            .zip(head.par_iter())
            .for_each(|(d, s)| *d += s);
    }
}
