//! The GEMM of each convolution pass over `rows` output pixels, in the backend's
//! layouts: the im2col matrix (or, for a 1×1 stride-1 convolution, the input itself)
//! `[rows, K]` with `K = kernel_h·kernel_w·in_c`, HWIO weights `[K, out_c]` and the
//! output `[rows, out_c]`.

use super::driver::{DevicePtr, Gemm, GemmTypes, Transpose};
use crate::engine::backend::Conv2dParams;

/// A pass of a convolution, for the implicit-GEMM kernels, which read their operands in
/// place: each is a GEMM `[rows, depth] × [depth, cols]` into a row-major `[rows, cols]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// y [pixels, Cout] from x and W: depth (kh, kw, ci).
    Forward,
    /// dx [input pixels, Cin] from dy and W: depth (kh, kw, co).
    BackwardData,
    /// dW [KH·KW·Cin, Cout] from x and dy: depth every output pixel of the batch.
    BackwardFilter,
}

impl Pass {
    /// The f32 entry point; the 16-bit forms carry the format's suffix.
    pub fn implicit_kernel(self) -> &'static str {
        match self {
            Pass::Forward => "conv_implicit_forward",
            Pass::BackwardData => "conv_implicit_backward_data",
            Pass::BackwardFilter => "conv_implicit_backward_filter",
        }
    }

    /// (rows, cols, depth).
    pub fn dims(self, p: &Conv2dParams) -> (usize, usize, usize) {
        let pixels = p.batch * p.out_h() * p.out_w();
        match self {
            Pass::Forward => (pixels, p.out_c, depth(p)),
            Pass::BackwardData => (
                p.batch * p.in_h * p.in_w,
                p.in_c,
                p.kernel_h * p.kernel_w * p.out_c,
            ),
            Pass::BackwardFilter => (depth(p), p.out_c, pixels),
        }
    }
}

fn depth(p: &Conv2dParams) -> usize {
    p.kernel_h * p.kernel_w * p.in_c
}

/// y := col × W.
pub fn forward(p: &Conv2dParams, rows: usize, col: DevicePtr, w: DevicePtr, y: DevicePtr) -> Gemm {
    let (k, cout) = (depth(p), p.out_c);
    Gemm {
        m: rows,
        n: cout,
        k,
        a: col,
        lda: k,
        trans_a: Transpose::No,
        b: w,
        ldb: cout,
        trans_b: Transpose::No,
        c: y,
        ldc: cout,
        alpha: 1.0,
        beta: 0.0,
        types: GemmTypes::F32,
    }
}

/// dcol := dy × Wᵀ.
pub fn backward_data(
    p: &Conv2dParams,
    rows: usize,
    dy: DevicePtr,
    w: DevicePtr,
    dcol: DevicePtr,
) -> Gemm {
    let (k, cout) = (depth(p), p.out_c);
    Gemm {
        m: rows,
        n: k,
        k: cout,
        a: dy,
        lda: cout,
        trans_a: Transpose::No,
        b: w,
        ldb: cout,
        trans_b: Transpose::Yes,
        c: dcol,
        ldc: k,
        alpha: 1.0,
        beta: 0.0,
        types: GemmTypes::F32,
    }
}

/// dW := colᵀ × dy, or dW += colᵀ × dy when `accumulate` (the chunks after the first).
pub fn backward_filter(
    p: &Conv2dParams,
    rows: usize,
    col: DevicePtr,
    dy: DevicePtr,
    dw: DevicePtr,
    accumulate: bool,
) -> Gemm {
    let (k, cout) = (depth(p), p.out_c);
    Gemm {
        m: k,
        n: cout,
        k: rows,
        a: col,
        lda: k,
        trans_a: Transpose::Yes,
        b: dy,
        ldb: cout,
        trans_b: Transpose::No,
        c: dw,
        ldc: cout,
        alpha: 1.0,
        beta: if accumulate { 1.0 } else { 0.0 },
        types: GemmTypes::F32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv() -> Conv2dParams {
        Conv2dParams {
            batch: 2,
            in_h: 9,
            in_w: 7,
            in_c: 5,
            out_c: 6,
            kernel_h: 3,
            kernel_w: 3,
            stride: 1,
            padding: 1,
        }
    }

    #[test]
    fn each_pass_has_consistent_shapes_and_leading_dimensions() {
        let p = conv();
        let rows = p.batch * p.out_h() * p.out_w();
        let (a, b, c) = (DevicePtr(1), DevicePtr(2), DevicePtr(3));
        for g in [
            forward(&p, rows, a, b, c),
            backward_data(&p, rows, a, b, c),
            backward_filter(&p, rows, a, b, c, false),
        ] {
            g.validate().unwrap();
        }
        let f = forward(&p, rows, a, b, c);
        assert_eq!((f.m, f.n, f.k), (rows, 6, 45));
        let d = backward_data(&p, rows, a, b, c);
        assert_eq!((d.m, d.n, d.k, d.trans_b), (rows, 45, 6, Transpose::Yes));
        let w = backward_filter(&p, rows, a, b, c, false);
        assert_eq!((w.m, w.n, w.k, w.trans_a), (45, 6, rows, Transpose::Yes));
        assert_eq!(w.beta, 0.0);
        assert_eq!(backward_filter(&p, rows, a, b, c, true).beta, 1.0);
    }

    #[test]
    fn implicit_passes_have_the_dimensions_of_their_explicit_gemms() {
        let p = conv();
        let rows = p.batch * p.out_h() * p.out_w();
        let (a, b, c) = (DevicePtr(1), DevicePtr(2), DevicePtr(3));
        let f = forward(&p, rows, a, b, c);
        assert_eq!(Pass::Forward.dims(&p), (f.m, f.n, f.k));
        let w = backward_filter(&p, rows, a, b, c, false);
        assert_eq!(Pass::BackwardFilter.dims(&p), (w.m, w.n, w.k));
        // The data gradient gathers over (kh, kw, co) per input pixel instead of
        // scattering the column gradient: 2·9·7 pixels of 5 channels, 9·6 deep.
        assert_eq!(Pass::BackwardData.dims(&p), (126, 5, 54));
    }
}
