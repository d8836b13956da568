//! A safe, strided wrapper over the `gemm` crate.
//!
//! `gemm::gemm` computes `dst := alpha·dst + beta·lhs·rhs` and describes every matrix by a
//! (column stride, row stride) pair; getting one stride wrong silently yields wrong
//! numbers, so every call in the CPU backend goes through [`matmul`], which names strides
//! by row and column and bounds-checks them against the slices.

use gemm::Parallelism;

/// A read-only matrix view: element (i, j) lies at `data[i·row_stride + j·col_stride]`.
#[derive(Clone, Copy)]
pub struct MatRef<'a> {
    /// The elements the view indexes into; every addressed element must lie inside it.
    pub data: &'a [f32],
    /// Number of rows.
    pub rows: usize,
    /// Number of columns.
    pub cols: usize,
    /// Elements from one row to the next.
    pub row_stride: usize,
    /// Elements from one column to the next.
    pub col_stride: usize,
}

/// A mutable matrix view with the same addressing as [`MatRef`].
pub struct MatMut<'a> {
    /// The elements the view indexes into; every addressed element must lie inside it.
    pub data: &'a mut [f32],
    /// Number of rows.
    pub rows: usize,
    /// Number of columns.
    pub cols: usize,
    /// Elements from one row to the next.
    pub row_stride: usize,
    /// Elements from one column to the next.
    pub col_stride: usize,
}

impl<'a> MatRef<'a> {
    /// A dense row-major `rows × cols` matrix.
    pub fn row_major(data: &'a [f32], rows: usize, cols: usize) -> Self {
        MatRef {
            data,
            rows,
            cols,
            row_stride: cols,
            col_stride: 1,
        }
    }

    /// The transpose, without moving data.
    pub fn t(self) -> Self {
        MatRef {
            data: self.data,
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
        }
    }
}

impl<'a> MatMut<'a> {
    /// A dense row-major `rows × cols` matrix.
    pub fn row_major(data: &'a mut [f32], rows: usize, cols: usize) -> Self {
        MatMut {
            data,
            rows,
            cols,
            row_stride: cols,
            col_stride: 1,
        }
    }
}

fn last_index(rows: usize, cols: usize, row_stride: usize, col_stride: usize) -> usize {
    (rows - 1) * row_stride + (cols - 1) * col_stride
}

/// `dst := lhs·rhs`, or `dst += lhs·rhs` when `accumulate`; `threads > 1` lets the GEMM
/// split the work itself (use it only outside other parallel loops).
pub fn matmul(dst: MatMut<'_>, lhs: MatRef<'_>, rhs: MatRef<'_>, accumulate: bool, threads: usize) {
    let (m, n, k) = (dst.rows, dst.cols, lhs.cols);
    assert!(
        lhs.rows == m && rhs.rows == k && rhs.cols == n,
        "matmul shapes: dst {m}×{n}, lhs {}×{}, rhs {}×{}",
        lhs.rows,
        lhs.cols,
        rhs.rows,
        rhs.cols
    );
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            for i in 0..m {
                for j in 0..n {
                    dst.data[i * dst.row_stride + j * dst.col_stride] = 0.0;
                }
            }
        }
        return;
    }
    // The bounds checks that make the raw-pointer call below sound.
    assert!(last_index(m, n, dst.row_stride, dst.col_stride) < dst.data.len());
    assert!(last_index(m, k, lhs.row_stride, lhs.col_stride) < lhs.data.len());
    assert!(last_index(k, n, rhs.row_stride, rhs.col_stride) < rhs.data.len());
    let parallelism = if threads > 1 {
        Parallelism::Rayon(threads)
    } else {
        Parallelism::None
    };
    // SAFETY: every index the GEMM touches lies inside its slice (checked above), the
    // destination is borrowed mutably and so aliases neither operand.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.data.as_mut_ptr(),
            dst.col_stride as isize,
            dst.row_stride as isize,
            accumulate,
            lhs.data.as_ptr(),
            lhs.col_stride as isize,
            lhs.row_stride as isize,
            rhs.data.as_ptr(),
            rhs.col_stride as isize,
            rhs.row_stride as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|l| a[i * k + l] * b[l * n + j]).sum();
            }
        }
        c
    }

    #[test]
    fn row_major_and_transposed_views_match_a_naive_product() {
        let (m, n, k) = (7, 5, 9);
        let a: Vec<f32> = (0..m * k).map(|i| (i % 11) as f32 - 5.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i % 7) as f32 * 0.5 - 1.0).collect();
        let expected = naive(&a, &b, m, n, k);

        let mut c = vec![0.0; m * n];
        matmul(
            MatMut::row_major(&mut c, m, n),
            MatRef::row_major(&a, m, k),
            MatRef::row_major(&b, k, n),
            false,
            1,
        );
        assert_eq!(c, expected);

        // Aᵀ stored as k×m, Bᵀ stored as n×k: the same product through transposed views.
        let at: Vec<f32> = (0..k * m).map(|idx| a[(idx % m) * k + idx / m]).collect();
        let bt: Vec<f32> = (0..n * k).map(|idx| b[(idx % k) * n + idx / k]).collect();
        let mut c2 = vec![1.0; m * n];
        matmul(
            MatMut::row_major(&mut c2, m, n),
            MatRef::row_major(&at, k, m).t(),
            MatRef::row_major(&bt, n, k).t(),
            true,
            2,
        );
        for (got, want) in c2.iter().zip(&expected) {
            assert_eq!(*got, want + 1.0);
        }
    }
}
