//! `tensor.matmul`: batched matrix product with broadcast batch dimensions and transpose flags.
//!
//! The product is computed by a small safe GEMM that reads each operand through (row, column)
//! strides, so a transpose flag only swaps the two strides and never copies the operand. It
//! packs one block of `b` at a time (as BLAS kernels do) and accumulates every output element
//! over `k` in increasing order, starting from zero, so its result is bit-identical to the naive
//! `acc = 0; for k { acc = acc + a[i][k] * b[k][j] }` loop: the oracle's rounding is the
//! textbook one, independent of block sizes.
//!
//! `matrixmultiply` would be faster, but its `sgemm`/`dgemm` are `unsafe fn`s and this crate
//! admits no `unsafe`; a reference oracle can afford the difference.

use super::error::{KernelError, Result};
use super::layout::{broadcast_strides, checked_numel, Offsets};
use super::scalar::Real;
use super::tensor::{broadcast_shapes_named, Tensor};

/// Rows of `b` packed per block: the `k` extent of one packed panel.
const KC: usize = 128;
/// Columns of `b` packed per block: the `n` extent of one packed panel and of the `c` row
/// segment that stays in L1 while `k` advances.
const NC: usize = 256;

/// `tensor.matmul`: `out[..., m, n] = Σ_k A[..., m, k] · B[..., k, n]`.
///
/// `a` holds `A` as `[..., M, K]`, or as `[..., K, M]` when `transpose_a` is set (then
/// `A = aᵀ` over the last two axes); likewise `b` holds `B` as `[..., K, N]`, or `[..., N, K]`
/// with `transpose_b`. Both operands need rank ≥ 2. The batch dimensions (all but the last two)
/// broadcast as NumPy does, so the result is `broadcast(batch_a, batch_b) ++ [M, N]`. `K = 0`
/// gives zeros. Errors: an operand of rank < 2, inner extents that differ, or batch dimensions
/// that do not broadcast.
pub fn matmul<T: Real>(
    a: &Tensor<T>,
    b: &Tensor<T>,
    transpose_a: bool,
    transpose_b: bool,
) -> Result<Tensor<T>> {
    const OP: &str = "matmul";
    for (name, t) in [("lhs", a), ("rhs", b)] {
        if t.rank() < 2 {
            return Err(KernelError::shape(
                OP,
                format!("{name} must have rank >= 2, got shape {:?}", t.shape()),
            ));
        }
    }
    let (ra, rb) = (a.rank(), b.rank());
    let (a0, a1) = (a.shape()[ra - 2], a.shape()[ra - 1]);
    let (b0, b1) = (b.shape()[rb - 2], b.shape()[rb - 1]);
    // Logical extents and the (row, column) strides of the logical matrices inside the stored
    // ones: a stored [r, c] matrix has strides (c, 1); its transpose reads them as (1, c).
    let (m, k, rsa, csa) = if transpose_a { (a1, a0, 1, a1) } else { (a0, a1, a1, 1) };
    let (kb, n, rsb, csb) = if transpose_b { (b1, b0, 1, b1) } else { (b0, b1, b1, 1) };
    if k != kb {
        return Err(KernelError::shape(
            OP,
            format!(
                "inner dimensions differ: lhs {:?}{} has K = {k}, rhs {:?}{} has K = {kb}",
                a.shape(),
                if transpose_a { " (transposed)" } else { "" },
                b.shape(),
                if transpose_b { " (transposed)" } else { "" },
            ),
        ));
    }
    let batch_a = &a.shape()[..ra - 2];
    let batch_b = &b.shape()[..rb - 2];
    let batch = broadcast_shapes_named(OP, batch_a, batch_b)?;
    let mut out_shape = batch.clone();
    out_shape.extend([m, n]);
    let total = checked_numel(OP, &out_shape)?;
    let mut out = vec![T::zero(); total];
    if total == 0 {
        return Ok(Tensor::from_parts(out_shape, out));
    }

    let (size_a, size_b) = (m * k, k * n);
    let stride_a: Vec<usize> =
        broadcast_strides(batch_a, &batch).into_iter().map(|s| s * size_a).collect();
    let stride_b: Vec<usize> =
        broadcast_strides(batch_b, &batch).into_iter().map(|s| s * size_b).collect();
    let offsets = Offsets::new(&batch, &stride_a, 0).zip(Offsets::new(&batch, &stride_b, 0));
    for ((off_a, off_b), c) in offsets.zip(out.chunks_exact_mut(m * n)) {
        let lhs = Strided { data: &a.data()[off_a..off_a + size_a], rs: rsa, cs: csa };
        let rhs = Strided { data: &b.data()[off_b..off_b + size_b], rs: rsb, cs: csb };
        gemm(m, k, n, lhs, rhs, c);
    }
    Ok(Tensor::from_parts(out_shape, out))
}

/// A matrix read through (row, column) strides.
#[derive(Debug, Clone, Copy)]
struct Strided<'a, T> {
    data: &'a [T],
    rs: usize,
    cs: usize,
}

impl<T: Copy> Strided<'_, T> {
    fn at(&self, row: usize, col: usize) -> T {
        self.data[row * self.rs + col * self.cs]
    }
}

/// `c += a · b` for an `m×k` `a`, a `k×n` `b` and a zeroed row-major `m×n` `c`.
fn gemm<T: Real>(m: usize, k: usize, n: usize, a: Strided<'_, T>, b: Strided<'_, T>, c: &mut [T]) {
    let mut panel = vec![T::zero(); KC.min(k) * NC.min(n)];
    for j0 in (0..n).step_by(NC) {
        let nc = NC.min(n - j0);
        for p0 in (0..k).step_by(KC) {
            let kc = KC.min(k - p0);
            // Pack b[p0.., j0..] row-major, so the inner loop reads it contiguously.
            for (p, row) in panel.chunks_exact_mut(nc).take(kc).enumerate() {
                if b.cs == 1 {
                    let start = (p0 + p) * b.rs + j0;
                    row.copy_from_slice(&b.data[start..start + nc]);
                } else {
                    for (j, slot) in row.iter_mut().enumerate() {
                        *slot = b.at(p0 + p, j0 + j);
                    }
                }
            }
            for i in 0..m {
                let c_row = &mut c[i * n + j0..i * n + j0 + nc];
                let mut rows = panel.chunks_exact(nc).take(kc).enumerate();
                // Four k steps per sweep over c_row, folded left to right so the sum order per
                // element is still k = 0, 1, 2, ...
                while let (Some((p, b0)), Some((_, b1)), Some((_, b2)), Some((_, b3))) =
                    (rows.next(), rows.next(), rows.next(), rows.next())
                {
                    let [x0, x1, x2, x3] = [0, 1, 2, 3].map(|d| a.at(i, p0 + p + d));
                    for ((((cv, &y0), &y1), &y2), &y3) in
                        c_row.iter_mut().zip(b0).zip(b1).zip(b2).zip(b3)
                    {
                        *cv = *cv + x0 * y0 + x1 * y1 + x2 * y2 + x3 * y3;
                    }
                }
                for p in (kc - kc % 4)..kc {
                    let x = a.at(i, p0 + p);
                    for (cv, &y) in c_row.iter_mut().zip(&panel[p * nc..(p + 1) * nc]) {
                        *cv = *cv + x * y;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_by_three_times_three_by_two() {
        let a = Tensor::new(vec![2, 3], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        let b = Tensor::new(vec![3, 2], vec![7.0f32, 8.0, 9.0, 10.0, 11.0, 12.0]).unwrap();
        let c = matmul(&a, &b, false, false).unwrap();
        assert_eq!(c.shape(), &[2, 2]);
        assert_eq!(c.data(), &[58.0, 64.0, 139.0, 154.0]);
        // aᵀ stored as [3, 2] and bᵀ stored as [2, 3] give the same product.
        let at = Tensor::new(vec![3, 2], vec![1.0f32, 4.0, 2.0, 5.0, 3.0, 6.0]).unwrap();
        let bt = Tensor::new(vec![2, 3], vec![7.0f32, 9.0, 11.0, 8.0, 10.0, 12.0]).unwrap();
        assert_eq!(matmul(&at, &bt, true, true).unwrap(), c);
        assert_eq!(matmul(&at, &b, true, false).unwrap(), c);
        assert_eq!(matmul(&a, &bt, false, true).unwrap(), c);
    }

    /// `out[i, j, m, n] = Σ_k a[i, 0, k, m] · b[j, n, k]`: a batch-broadcast product with both
    /// operands transposed, written out index by index.
    #[test]
    fn batch_broadcast_with_transposes_matches_naive_loop() {
        let (m, k, n) = (3, 5, 4);
        let a =
            Tensor::from_fn(&[2, 1, k, m], |i| ((i[0] * 7 + i[2] * 3 + i[3]) % 11) as f64 - 5.0)
                .unwrap();
        let b =
            Tensor::from_fn(&[3, n, k], |i| ((i[0] * 5 + i[1] * 2 + i[2] * 3) % 7) as f64 * 0.5)
                .unwrap();
        let c = matmul(&a, &b, true, true).unwrap();
        assert_eq!(c.shape(), &[2, 3, m, n]);
        for i in 0..2 {
            for j in 0..3 {
                for mm in 0..m {
                    for nn in 0..n {
                        let mut acc = 0.0;
                        for kk in 0..k {
                            acc += a.get(&[i, 0, kk, mm]).unwrap() * b.get(&[j, nn, kk]).unwrap();
                        }
                        assert_eq!(c.get(&[i, j, mm, nn]).unwrap(), acc, "at {i},{j},{mm},{nn}");
                    }
                }
            }
        }
    }

    /// Shapes that span several packed blocks in every direction, and every transpose pair,
    /// against the naive loop; the sum order is the same, so the results are identical.
    #[test]
    fn blocked_kernel_equals_naive_loop_across_blocks() {
        let (m, k, n) = (3, KC + 7, NC + 5);
        let a = Tensor::from_fn(&[m, k], |i| ((i[0] * 31 + i[1] * 17) % 13) as f32 / 7.0 - 0.9)
            .unwrap();
        let b =
            Tensor::from_fn(&[k, n], |i| ((i[0] * 11 + i[1] * 5) % 19) as f32 / 9.0 - 1.1).unwrap();
        let naive = Tensor::from_fn(&[m, n], |i| {
            (0..k).fold(0.0f32, |acc, p| {
                acc + a.get(&[i[0], p]).unwrap() * b.get(&[p, i[1]]).unwrap()
            })
        })
        .unwrap();
        let at = Tensor::from_fn(&[k, m], |i| a.get(&[i[1], i[0]]).unwrap()).unwrap();
        let bt = Tensor::from_fn(&[n, k], |i| b.get(&[i[1], i[0]]).unwrap()).unwrap();
        assert_eq!(matmul(&a, &b, false, false).unwrap(), naive);
        assert_eq!(matmul(&at, &b, true, false).unwrap(), naive);
        assert_eq!(matmul(&a, &bt, false, true).unwrap(), naive);
        assert_eq!(matmul(&at, &bt, true, true).unwrap(), naive);
    }

    #[test]
    fn empty_extents() {
        let a = Tensor::<f32>::zeros(&[2, 0]).unwrap();
        let b = Tensor::<f32>::zeros(&[0, 3]).unwrap();
        assert_eq!(matmul(&a, &b, false, false).unwrap(), Tensor::zeros(&[2, 3]).unwrap());
        let a = Tensor::<f32>::zeros(&[0, 2, 4]).unwrap();
        let b = Tensor::<f32>::zeros(&[4, 3]).unwrap();
        assert_eq!(matmul(&a, &b, false, false).unwrap().shape(), &[0, 2, 3]);
    }

    #[test]
    fn rejects_bad_shapes() {
        let a = Tensor::<f32>::zeros(&[2, 3]).unwrap();
        let v = Tensor::<f32>::zeros(&[3]).unwrap();
        assert!(matches!(matmul(&a, &v, false, false), Err(KernelError::Shape { .. })));
        assert!(matches!(matmul(&a, &a, false, false), Err(KernelError::Shape { .. })));
        assert!(matmul(&a, &a, false, true).is_ok());
        let x = Tensor::<f32>::zeros(&[2, 2, 3]).unwrap();
        let y = Tensor::<f32>::zeros(&[3, 3, 4]).unwrap();
        assert!(matches!(matmul(&x, &y, false, false), Err(KernelError::Broadcast { .. })));
    }
}
