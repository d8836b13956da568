//! AVX-512 loops of the batch norm for channel counts that are multiples of 16, one
//! chunk of rows per call. The crate is built for baseline x86-64, so the portable loops
//! in `batchnorm` run on 128-bit vectors; here every row is whole 16-lane vectors, and
//! the sums keep two independent accumulators so additions do not wait on each other.
//!
//! Each function returns `false`, doing nothing, when the CPU or the channel count is not
//! one it handles.

/// f32 lanes of one vector.
const LANES: usize = 16;

fn usable(channels: usize, slices: &[usize]) -> bool {
    channels > 0
        && channels.is_multiple_of(LANES)
        && slices.iter().all(|len| len.is_multiple_of(channels))
        && cpu_has_avx512()
}

fn cpu_has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// What the per-channel sums add up.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Sums {
    /// Σ(a − centre) and Σ(a − centre)²: the forward's statistics.
    Centred,
    /// Σa and Σa·(b − centre): the backward's Σdy and Σdy·(x − mean).
    Gradient,
}

/// Adds the sums of `kind` over the rows of `a` (and `b`) to `total1` and `total2`, in
/// f32 over blocks of `block_rows` rows, flushed into the f64 totals.
#[allow(clippy::too_many_arguments)]
pub fn channel_sums(
    kind: Sums,
    channels: usize,
    block_rows: usize,
    a: &[f32],
    b: &[f32],
    centre: &[f32],
    total1: &mut [f64],
    total2: &mut [f64],
) -> bool {
    let b_len = if kind == Sums::Gradient {
        b.len()
    } else {
        a.len()
    };
    if !usable(channels, &[a.len()])
        || b_len != a.len()
        || centre.len() != channels
        || total1.len() != channels
        || total2.len() != channels
    {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the CPU has AVX-512 and every slice length was checked above.
    unsafe {
        match kind {
            Sums::Centred => {
                kernels::sums::<false>(channels, block_rows.max(1), a, a, centre, total1, total2)
            }
            Sums::Gradient => {
                kernels::sums::<true>(channels, block_rows.max(1), a, b, centre, total1, total2)
            }
        }
    }
    true
}

/// `y := x·scale[c] + shift[c]`.
pub fn affine(channels: usize, x: &[f32], scale: &[f32], shift: &[f32], y: &mut [f32]) -> bool {
    if !usable(channels, &[x.len()])
        || y.len() != x.len()
        || scale.len() != channels
        || shift.len() != channels
    {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as in `channel_sums`.
    unsafe {
        kernels::affine(channels, x, scale, shift, y)
    }
    true
}

/// `dx := x·a[c] + dy·g[c] + b[c]`.
#[allow(clippy::too_many_arguments)]
pub fn backward_dx(
    channels: usize,
    x: &[f32],
    dy: &[f32],
    a: &[f32],
    g: &[f32],
    b: &[f32],
    dx: &mut [f32],
) -> bool {
    if !usable(channels, &[x.len()])
        || dy.len() != x.len()
        || dx.len() != x.len()
        || [a.len(), g.len(), b.len()] != [channels; 3]
    {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as in `channel_sums`.
    unsafe {
        kernels::backward_dx(channels, x, dy, a, g, b, dx)
    }
    true
}

#[cfg(target_arch = "x86_64")]
mod kernels {
    //! Callers guarantee AVX-512 and that every row slice is a whole number of rows of
    //! `channels` (a multiple of 16) floats, and per-channel slices are `channels` long.

    use std::arch::x86_64::*;

    use super::LANES;

    #[target_feature(enable = "avx512f")]
    pub unsafe fn sums<const GRADIENT: bool>(
        channels: usize,
        block_rows: usize,
        a: &[f32],
        b: &[f32],
        centre: &[f32],
        total1: &mut [f64],
        total2: &mut [f64],
    ) {
        let rows = a.len() / channels;
        let (a, b) = (a.as_ptr(), b.as_ptr());
        let mut block1 = [0.0f32; LANES];
        let mut block2 = [0.0f32; LANES];
        let mut start = 0;
        while start < rows {
            let end = (start + block_rows).min(rows);
            for off in (0..channels).step_by(LANES) {
                let c = _mm512_loadu_ps(centre.as_ptr().add(off));
                let (mut s1a, mut s2a) = (_mm512_setzero_ps(), _mm512_setzero_ps());
                let (mut s1b, mut s2b) = (_mm512_setzero_ps(), _mm512_setzero_ps());
                macro_rules! row {
                    ($r:expr, $s1:ident, $s2:ident) => {{
                        let at = $r * channels + off;
                        let av = _mm512_loadu_ps(a.add(at));
                        if GRADIENT {
                            let xc = _mm512_sub_ps(_mm512_loadu_ps(b.add(at)), c);
                            $s1 = _mm512_add_ps($s1, av);
                            $s2 = _mm512_fmadd_ps(av, xc, $s2);
                        } else {
                            let d = _mm512_sub_ps(av, c);
                            $s1 = _mm512_add_ps($s1, d);
                            $s2 = _mm512_fmadd_ps(d, d, $s2);
                        }
                    }};
                }
                let mut r = start;
                while r + 1 < end {
                    row!(r, s1a, s2a);
                    row!(r + 1, s1b, s2b);
                    r += 2;
                }
                if r < end {
                    row!(r, s1a, s2a);
                }
                let (s1, s2) = (_mm512_add_ps(s1a, s1b), _mm512_add_ps(s2a, s2b));
                _mm512_storeu_ps(block1.as_mut_ptr(), s1);
                _mm512_storeu_ps(block2.as_mut_ptr(), s2);
                for i in 0..LANES {
                    total1[off + i] += block1[i] as f64;
                    total2[off + i] += block2[i] as f64;
                }
            }
            start = end;
        }
    }

    #[target_feature(enable = "avx512f")]
    pub unsafe fn affine(channels: usize, x: &[f32], scale: &[f32], shift: &[f32], y: &mut [f32]) {
        let (xp, yp) = (x.as_ptr(), y.as_mut_ptr());
        for row in (0..x.len()).step_by(channels) {
            for off in (0..channels).step_by(LANES) {
                let v = _mm512_loadu_ps(xp.add(row + off));
                let s = _mm512_loadu_ps(scale.as_ptr().add(off));
                let t = _mm512_loadu_ps(shift.as_ptr().add(off));
                _mm512_storeu_ps(yp.add(row + off), _mm512_fmadd_ps(v, s, t));
            }
        }
    }

    #[target_feature(enable = "avx512f")]
    pub unsafe fn backward_dx(
        channels: usize,
        x: &[f32],
        dy: &[f32],
        a: &[f32],
        g: &[f32],
        b: &[f32],
        dx: &mut [f32],
    ) {
        let (xp, dyp, dxp) = (x.as_ptr(), dy.as_ptr(), dx.as_mut_ptr());
        for row in (0..x.len()).step_by(channels) {
            for off in (0..channels).step_by(LANES) {
                let xv = _mm512_loadu_ps(xp.add(row + off));
                let dv = _mm512_loadu_ps(dyp.add(row + off));
                let av = _mm512_loadu_ps(a.as_ptr().add(off));
                let gv = _mm512_loadu_ps(g.as_ptr().add(off));
                let bv = _mm512_loadu_ps(b.as_ptr().add(off));
                let out = _mm512_fmadd_ps(xv, av, _mm512_fmadd_ps(dv, gv, bv));
                _mm512_storeu_ps(dxp.add(row + off), out);
            }
        }
    }
}
