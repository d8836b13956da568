//! Direct convolutions for narrow layers (up to 64 channels in and out) on AVX-512.
//!
//! At these widths an im2col GEMM spends most of its time copying and packing: the GEMM's
//! micro-kernel is only one vector wide and the im2col tile is rewritten for every tile.
//! Here each image is copied once into a zero-padded scratch image, and the kernels read
//! their taps straight from it: for a fixed kernel row `kh`, the taps `(kw, ci)` of one
//! output pixel are one contiguous run of `KW·Cin` floats of the padded input, and the
//! matching weight rows are contiguous in HWIO order, so the convolution is a GEMM whose
//! operands are addressed in place. Output channels are 1 to 4 vectors of 16 lanes kept
//! in registers across a block of output pixels (forward) or input taps (filter
//! gradient). Work is split across threads by image.
//!
//! Every entry point returns `false`, doing nothing, when the shape or the CPU is not one
//! it handles; the caller then takes the GEMM path.

use rayon::prelude::*;

use super::scratch::with_scratch;
use crate::engine::backend::Conv2dParams;

/// f32 lanes of one AVX-512 vector.
const LANES: usize = 16;
/// Widest output-channel count handled, in vectors: wider layers are GEMM-bound anyway.
const MAX_VECTORS: usize = 4;

/// Output channels as a count of vectors, when they fit the kernels.
fn vectors(channels: usize) -> Option<usize> {
    (channels.is_multiple_of(LANES) && (1..=MAX_VECTORS).contains(&(channels / LANES)))
        .then_some(channels / LANES)
}

pub(super) fn cpu_has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether the forward kernel handles `p`: 16 to 64 channels on both sides (wider
/// layers run faster as GEMMs, whose packing then pays off).
pub fn supports_forward(p: &Conv2dParams) -> bool {
    vectors(p.out_c).is_some() && p.in_c <= MAX_VECTORS * LANES && cpu_has_avx512()
}

/// Output image bytes up to which the filter gradient stays direct: its kernel rereads
/// one image's output gradient once per block of taps, so that must stay in L2.
const FILTER_MAX_OUT_IMAGE_BYTES: usize = 1 << 20;

/// Whether the filter-gradient kernel handles `p`.
pub fn supports_filter(p: &Conv2dParams) -> bool {
    supports_forward(p) && p.out_h() * p.out_w() * p.out_c * 4 <= FILTER_MAX_OUT_IMAGE_BYTES
}

/// Whether the data-gradient kernel handles `p`: a stride-1 square kernel whose
/// transposed convolution (input and output channels swapped) the forward handles.
pub fn supports_backward_data(p: &Conv2dParams) -> bool {
    p.stride == 1
        && p.kernel_h == p.kernel_w
        && p.padding < p.kernel_h
        && vectors(p.in_c).is_some()
        && p.out_c <= MAX_VECTORS * LANES
        && cpu_has_avx512()
}

/// Sizes of one image, its zero-padded copy and its output.
#[derive(Clone, Copy)]
struct Geometry {
    cin: usize,
    cout: usize,
    kh: usize,
    kw: usize,
    stride: usize,
    in_h: usize,
    in_w: usize,
    pad: usize,
    /// Padded input width in pixels.
    pw: usize,
    out_h: usize,
    out_w: usize,
}

impl Geometry {
    fn new(p: &Conv2dParams) -> Self {
        Geometry {
            cin: p.in_c,
            cout: p.out_c,
            kh: p.kernel_h,
            kw: p.kernel_w,
            stride: p.stride,
            in_h: p.in_h,
            in_w: p.in_w,
            pad: p.padding,
            pw: p.in_w + 2 * p.padding,
            out_h: p.out_h(),
            out_w: p.out_w(),
        }
    }

    fn image_len(&self) -> usize {
        self.in_h * self.in_w * self.cin
    }

    fn padded_len(&self) -> usize {
        (self.in_h + 2 * self.pad) * self.pw * self.cin
    }

    fn out_image_len(&self) -> usize {
        self.out_h * self.out_w * self.cout
    }

    /// Floats of one kernel row of taps: `KW·Cin`.
    fn row_taps(&self) -> usize {
        self.kw * self.cin
    }

    /// Copies one NHWC image into `padded` with a zero border of `pad` pixels; only the
    /// border is cleared, as the copy overwrites the rest.
    fn pad_image(&self, image: &[f32], padded: &mut [f32]) {
        let row = self.in_w * self.cin;
        let padded_row = self.pw * self.cin;
        let left = self.pad * self.cin;
        let top = self.pad * padded_row;
        padded[..top].fill(0.0);
        padded[top + self.in_h * padded_row..].fill(0.0);
        for (ih, src) in image.chunks_exact(row).enumerate() {
            let start = top + ih * padded_row;
            padded[start..start + left].fill(0.0);
            padded[start + left..start + left + row].copy_from_slice(src);
            padded[start + left + row..start + padded_row].fill(0.0);
        }
    }

    /// Runs `f` on the image as the kernels read it: the image itself when there is no
    /// padding, else its zero-padded copy in this thread's scratch.
    fn with_padded<R>(&self, image: &[f32], f: impl FnOnce(&[f32]) -> R) -> R {
        if self.pad == 0 {
            return f(image);
        }
        with_scratch(self.padded_len(), |padded| {
            self.pad_image(image, padded);
            f(padded)
        })
    }
}

/// `y := conv(x, w)`; lengths already validated. `false` (and nothing written) when the
/// shape or CPU is not handled.
pub fn forward(p: &Conv2dParams, x: &[f32], w: &[f32], y: &mut [f32]) -> bool {
    if !supports_forward(p) {
        return false;
    }
    forward_unchecked(p, x, w, y);
    true
}

/// `dx := convᵀ(dy, w)` for stride 1: the convolution of `dy`, padded by `K−1−pad`, with
/// the weights flipped in both spatial axes and transposed in their channels.
pub fn backward_data(p: &Conv2dParams, dy: &[f32], w: &[f32], dx: &mut [f32]) -> bool {
    if !supports_backward_data(p) {
        return false;
    }
    let k = p.kernel_h;
    let (cin, cout) = (p.in_c, p.out_c);
    let mut flipped = vec![0.0f32; w.len()];
    for kh in 0..k {
        for kw in 0..k {
            let src_tap = ((k - 1 - kh) * k + (k - 1 - kw)) * cin * cout;
            let dst_tap = (kh * k + kw) * cout * cin;
            for ci in 0..cin {
                for co in 0..cout {
                    flipped[dst_tap + co * cin + ci] = w[src_tap + ci * cout + co];
                }
            }
        }
    }
    let transposed = Conv2dParams {
        batch: p.batch,
        in_h: p.out_h(),
        in_w: p.out_w(),
        in_c: cout,
        out_c: cin,
        kernel_h: k,
        kernel_w: k,
        stride: 1,
        padding: k - 1 - p.padding,
    };
    forward_unchecked(&transposed, dy, &flipped, dx);
    true
}

fn forward_unchecked(p: &Conv2dParams, x: &[f32], w: &[f32], y: &mut [f32]) {
    let g = Geometry::new(p);
    y.par_chunks_mut(g.out_image_len())
        .zip(x.par_chunks(g.image_len()))
        .for_each(|(y_image, x_image)| {
            g.with_padded(x_image, |padded| {
                kernels::forward_image(&g, padded, w, y_image)
            });
        });
}

/// `dw := Σ_images x ⋆ dy`; lengths already validated. Each thread sums a contiguous
/// share of the images into its own partial, then the partials are added.
pub fn backward_filter(p: &Conv2dParams, x: &[f32], dy: &[f32], dw: &mut [f32]) -> bool {
    if !supports_filter(p) {
        return false;
    }
    let g = Geometry::new(p);
    let threads = rayon::current_num_threads().max(1);
    let shares = threads.min(p.batch).max(1);
    let per_share = p.batch.div_ceil(shares);
    let mut partials: Vec<Vec<f32>> = (1..shares).map(|_| vec![0.0; dw.len()]).collect();
    let mut targets: Vec<&mut [f32]> = Vec::with_capacity(shares);
    targets.push(&mut *dw);
    targets.extend(partials.iter_mut().map(|v| v.as_mut_slice()));
    targets.into_par_iter().enumerate().for_each(|(s, target)| {
        target.fill(0.0);
        let first = (s * per_share).min(p.batch);
        let last = ((s + 1) * per_share).min(p.batch);
        for n in first..last {
            let x_image = &x[n * g.image_len()..(n + 1) * g.image_len()];
            let dy_image = &dy[n * g.out_image_len()..(n + 1) * g.out_image_len()];
            g.with_padded(x_image, |padded| {
                kernels::filter_image(&g, padded, dy_image, target)
            });
        }
    });
    for part in &partials {
        dw.iter_mut().zip(part).for_each(|(d, s)| *d += s);
    }
    true
}

#[cfg(target_arch = "x86_64")]
mod kernels {
    //! The AVX-512 loops. Safety rests on [`Geometry`]: every pointer offset below is
    //! bounded by the padded image, weight, output or gradient length that the entry
    //! functions check with `assert!` before entering a `target_feature` function.

    use std::arch::x86_64::*;

    use super::{Geometry, LANES};

    /// Output pixels per register block for `v` vectors of output channels: about 24
    /// accumulators, leaving registers for the weights.
    const FORWARD_BLOCK: [usize; 5] = [0, 16, 8, 8, 4];
    /// Input taps per register block of the filter gradient, by vectors.
    const FILTER_BLOCK: [usize; 5] = [0, 16, 12, 8, 6];

    /// Splits `len` into blocks of `max`, then 8, 4, 2, 1 for the tail.
    fn blocks(len: usize, max: usize, mut f: impl FnMut(usize, usize)) {
        let mut start = 0;
        while start < len {
            let left = len - start;
            let size = [max, 8, 4, 2, 1]
                .into_iter()
                .find(|&b| b <= left && b <= max)
                .unwrap_or(1);
            f(start, size);
            start += size;
        }
    }

    /// Weight bytes one pass over an image's output uses: small enough to stay in L1
    /// while every pixel block of the image streams past it.
    const WEIGHT_CHUNK_BYTES: usize = 16 << 10;

    pub fn forward_image(g: &Geometry, padded: &[f32], w: &[f32], y_image: &mut [f32]) {
        assert!(padded.len() >= g.padded_len());
        assert!(w.len() >= g.kh * g.row_taps() * g.cout);
        assert!(y_image.len() >= g.out_image_len());
        assert!((g.out_h - 1) * g.stride + g.kh <= g.in_h + 2 * g.pad);
        assert!((g.out_w - 1) * g.stride + g.kw <= g.pw);
        let v = g.cout / LANES;
        // Wide layers' weights overflow L1: split the taps into chunks, each one pass over
        // the image's output that adds its share to what the previous passes stored.
        let total = g.kh * g.row_taps();
        let max_chunk = (WEIGHT_CHUNK_BYTES / (g.cout * 4)).max(1);
        let chunk = total.div_ceil(total.div_ceil(max_chunk));
        let mut first = 0;
        while first < total {
            let taps = first..(first + chunk).min(total);
            for oh in 0..g.out_h {
                blocks(g.out_w, FORWARD_BLOCK[v], |ow, r| {
                    let at = Block {
                        oh,
                        ow,
                        taps: taps.clone(),
                    };
                    // SAFETY: the asserts above bound every pixel, tap and weight the
                    // block reads and every output it writes; the CPU has AVX-512
                    // (`supports_forward`).
                    unsafe { forward_block_dispatch(g, v, r, padded, w, y_image, at) }
                });
            }
            first = taps.end;
        }
    }

    /// Where a forward block works: output row `oh` from column `ow`, over the taps
    /// `taps` (indices into the `KH·KW·Cin` rows of the weights).
    struct Block {
        oh: usize,
        ow: usize,
        taps: std::ops::Range<usize>,
    }

    #[allow(clippy::too_many_arguments)]
    unsafe fn forward_block_dispatch(
        g: &Geometry,
        v: usize,
        r: usize,
        padded: &[f32],
        w: &[f32],
        y: &mut [f32],
        at: Block,
    ) {
        // Full blocks of the common pixel steps get the step as a constant, so the block's
        // pixels are one base register plus constant offsets instead of a register each.
        let step = g.stride * g.cin;
        macro_rules! go {
            ($v:literal, $full:literal, [$($step:literal),*], $($r:literal),*) => {
                match (r, step) {
                    $(($full, $step) => forward_block::<$v, $full, $step>(g, padded, w, y, at),)*
                    $(($r, _) => forward_block::<$v, $r, 0>(g, padded, w, y, at),)*
                    _ => forward_block::<$v, 1, 0>(g, padded, w, y, at),
                }
            };
        }
        match v {
            1 => go!(1, 16, [3, 6, 16, 32, 64], 16, 8, 4, 2, 1),
            2 => go!(2, 8, [16, 32, 64], 8, 4, 2, 1),
            3 => go!(3, 8, [16, 32, 64], 8, 4, 2, 1),
            _ => go!(4, 4, [16, 32, 64, 128], 4, 2, 1),
        }
    }

    /// `R` output pixels from `at`, all `V` output vectors, over the taps of `at`: stored
    /// when they start at tap 0, added to the stored partial sums otherwise. `STEP` is
    /// the distance between the block's pixels in floats (`stride·Cin`), or 0 to read it
    /// from `g`.
    #[target_feature(enable = "avx512f")]
    unsafe fn forward_block<const V: usize, const R: usize, const STEP: usize>(
        g: &Geometry,
        padded: &[f32],
        w: &[f32],
        y: &mut [f32],
        at: Block,
    ) {
        let yp = y.as_mut_ptr().add((at.oh * g.out_w + at.ow) * g.cout);
        let mut acc = [[_mm512_setzero_ps(); V]; R];
        if at.taps.start > 0 {
            for (r, acc) in acc.iter_mut().enumerate() {
                for (i, a) in acc.iter_mut().enumerate() {
                    *a = _mm512_loadu_ps(yp.add(r * g.cout + i * LANES));
                }
            }
        }
        let taps = g.row_taps();
        let pixel_step = if STEP == 0 { g.stride * g.cin } else { STEP };
        let x_base = padded.as_ptr();
        let mut t = at.taps.start;
        while t < at.taps.end {
            // The taps of one kernel row are contiguous in the padded input.
            let kh = t / taps;
            let j0 = t - kh * taps;
            let j1 = taps.min(j0 + at.taps.end - t);
            let x_row = x_base.add(((at.oh * g.stride + kh) * g.pw + at.ow * g.stride) * g.cin);
            let w_row = w.as_ptr().add(kh * taps * g.cout);
            for j in j0..j1 {
                let wp = w_row.add(j * g.cout);
                let mut wv = [_mm512_setzero_ps(); V];
                for (i, wv) in wv.iter_mut().enumerate() {
                    *wv = _mm512_loadu_ps(wp.add(i * LANES));
                }
                let xp = x_row.add(j);
                for (r, acc) in acc.iter_mut().enumerate() {
                    let xb = _mm512_set1_ps(*xp.add(r * pixel_step));
                    for (a, &wv) in acc.iter_mut().zip(&wv) {
                        *a = _mm512_fmadd_ps(xb, wv, *a);
                    }
                }
            }
            t += j1 - j0;
        }
        for (r, acc) in acc.iter().enumerate() {
            for (i, &a) in acc.iter().enumerate() {
                _mm512_storeu_ps(yp.add(r * g.cout + i * LANES), a);
            }
        }
    }

    /// Adds one image's filter gradient to `dw`.
    pub fn filter_image(g: &Geometry, padded: &[f32], dy_image: &[f32], dw: &mut [f32]) {
        assert!(padded.len() >= g.padded_len());
        assert!(dy_image.len() >= g.out_image_len());
        assert!(dw.len() >= g.kh * g.row_taps() * g.cout);
        assert!((g.out_h - 1) * g.stride + g.kh <= g.in_h + 2 * g.pad);
        assert!((g.out_w - 1) * g.stride + g.kw <= g.pw);
        let v = g.cout / LANES;
        for kh in 0..g.kh {
            blocks(g.row_taps(), FILTER_BLOCK[v], |j, c| {
                // SAFETY: as in `forward_image`: the asserts bound every access.
                unsafe { filter_block_dispatch(g, v, c, padded, dy_image, dw, kh, j) }
            });
        }
    }

    #[allow(clippy::too_many_arguments)]
    unsafe fn filter_block_dispatch(
        g: &Geometry,
        v: usize,
        c: usize,
        padded: &[f32],
        dy: &[f32],
        dw: &mut [f32],
        kh: usize,
        j: usize,
    ) {
        macro_rules! go {
            ($v:literal, $($c:literal),*) => {
                match c {
                    $($c => filter_block::<$v, $c>(g, padded, dy, dw, kh, j),)*
                    _ => filter_block::<$v, 1>(g, padded, dy, dw, kh, j),
                }
            };
        }
        match v {
            1 => go!(1, 16, 8, 4, 2, 1),
            2 => go!(2, 12, 8, 4, 2, 1),
            3 => go!(3, 8, 4, 2, 1),
            _ => go!(4, 6, 4, 2, 1),
        }
    }

    /// The gradient of the `C` taps `j..j+C` of kernel row `kh` over the whole image.
    #[target_feature(enable = "avx512f")]
    unsafe fn filter_block<const V: usize, const C: usize>(
        g: &Geometry,
        padded: &[f32],
        dy: &[f32],
        dw: &mut [f32],
        kh: usize,
        j: usize,
    ) {
        let mut acc = [[_mm512_setzero_ps(); V]; C];
        let pixel_step = g.stride * g.cin;
        for oh in 0..g.out_h {
            let x_row = padded.as_ptr().add((oh * g.stride + kh) * g.pw * g.cin + j);
            let dy_row = dy.as_ptr().add(oh * g.out_w * g.cout);
            for ow in 0..g.out_w {
                let dp = dy_row.add(ow * g.cout);
                let mut dv = [_mm512_setzero_ps(); V];
                for (i, dv) in dv.iter_mut().enumerate() {
                    *dv = _mm512_loadu_ps(dp.add(i * LANES));
                }
                let xp = x_row.add(ow * pixel_step);
                for (c, acc) in acc.iter_mut().enumerate() {
                    let xb = _mm512_set1_ps(*xp.add(c));
                    for (a, &dv) in acc.iter_mut().zip(&dv) {
                        *a = _mm512_fmadd_ps(xb, dv, *a);
                    }
                }
            }
        }
        let dwp = dw.as_mut_ptr().add((kh * g.row_taps() + j) * g.cout);
        for (c, acc) in acc.iter().enumerate() {
            for (i, &a) in acc.iter().enumerate() {
                let p = dwp.add(c * g.cout + i * LANES);
                _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), a));
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod kernels {
    //! Never reached: every `supports_*` is false off x86-64.
    use super::Geometry;

    pub fn forward_image(_: &Geometry, _: &[f32], _: &[f32], _: &mut [f32]) {}
    pub fn filter_image(_: &Geometry, _: &[f32], _: &[f32], _: &mut [f32]) {}
}
