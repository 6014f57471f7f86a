//! `tensor.matmul`: batched matrix product with broadcast batch dimensions and transpose flags.
//!
//! Each product is one call of the GEMM core ([`Real::gemm`], `matrixmultiply` behind the
//! bounds-checked wrapper in `gemm.rs`), which reads each operand through (row, column) strides,
//! so a transpose flag only swaps the two strides and never copies the operand. Every output
//! element is a sum over `k` accumulated in `T`; the GEMM blocks `k` and may use fused
//! multiply-add, so the result can differ from the naive `acc = 0; for k { acc += a·b }` loop by
//! rounding (within `k·ε·Σ_k |a·b|`), but it is deterministic on a given machine.

use super::error::{KernelError, Result};
use super::layout::{broadcast_strides, checked_numel, Offsets};
use super::scalar::Real;
use super::tensor::{broadcast_shapes_named, Tensor};

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
        let lhs = &a.data()[off_a..off_a + size_a];
        let rhs = &b.data()[off_b..off_b + size_b];
        T::gemm(m, k, n, (lhs, rsa, csa), (rhs, rsb, csb), c)?;
    }
    Ok(Tensor::from_parts(out_shape, out))
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

    /// Shapes that span several of the GEMM's blocks along `m` and `k` (its f32 blocks are 64
    /// rows by 256 along `k`) with ragged edges, and every transpose pair, against the naive
    /// loop. The sum order differs (blocked, maybe fused), so the check is the standard error
    /// bound: both results are within `k·ε·Σ_k |a·b|` of the exact sum, so they differ by at most
    /// twice that. Separately, products of small integers are exact in any order and must match
    /// bit for bit.
    #[test]
    fn gemm_core_matches_naive_loop_across_blocks() {
        let (m, k, n) = (67, 263, 37);
        let a = Tensor::from_fn(&[m, k], |i| ((i[0] * 31 + i[1] * 17) % 13) as f32 / 7.0 - 0.9)
            .unwrap();
        let b =
            Tensor::from_fn(&[k, n], |i| ((i[0] * 11 + i[1] * 5) % 19) as f32 / 9.0 - 1.1).unwrap();
        let naive = |a: &Tensor<f32>, b: &Tensor<f32>| {
            Tensor::from_fn(&[m, n], |i| {
                (0..k).fold((0.0f32, 0.0f32), |(acc, mag), p| {
                    let x = a.get(&[i[0], p]).unwrap() * b.get(&[p, i[1]]).unwrap();
                    (acc + x, mag + x.abs())
                })
            })
            .unwrap()
        };
        let want = naive(&a, &b);
        let at = Tensor::from_fn(&[k, m], |i| a.get(&[i[1], i[0]]).unwrap()).unwrap();
        let bt = Tensor::from_fn(&[n, k], |i| b.get(&[i[1], i[0]]).unwrap()).unwrap();
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let got = matmul(if ta { &at } else { &a }, if tb { &bt } else { &b }, ta, tb).unwrap();
            assert_eq!(got.shape(), &[m, n]);
            for (idx, (&g, &(w, mag))) in got.data().iter().zip(want.data()).enumerate() {
                let bound = 2.0 * k as f32 * f32::EPSILON * mag;
                assert!((g - w).abs() <= bound, "({ta}, {tb}) element {idx}: {g} vs {w}");
            }
        }
        let ai = a.map(|v| (v * 7.0).round());
        let bi = b.map(|v| (v * 9.0).round());
        let exact = naive(&ai, &bi).map(|(acc, _)| acc);
        assert_eq!(matmul(&ai, &bi, false, false).unwrap(), exact);
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
