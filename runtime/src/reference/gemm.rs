//! The GEMM core of the reference matmul: `matrixmultiply`'s `sgemm`/`dgemm` behind a safe,
//! bounds-checked interface. This is the only module of fbc-runtime that contains `unsafe` code.
//!
//! Why `unsafe` here: `matrixmultiply` is a packed, cache-blocked, SIMD GEMM (about 5-10x the
//! throughput of the safe blocked loop it replaces), and its entry points are `unsafe fn`s taking
//! raw pointers and element strides. Everything else in the crate stays safe; this module turns
//! slices plus (rows, cols, row stride, column stride) descriptions into those pointers only
//! after proving, with checked arithmetic, that every element the GEMM can address lies inside
//! the slice it came from.
//!
//! Numerics: every output element is a sum over `k` of products, accumulated in the element type.
//! `matrixmultiply` splits `k` into blocks and may use fused multiply-add, so results can differ
//! from the textbook left-to-right loop by rounding (bounded by the usual `k·ε·Σ|a||b|`), but they
//! are deterministic on a given machine: the block sizes depend only on the shapes, and work is
//! never split along `k`.

#![allow(unsafe_code)]

use super::error::{KernelError, Result};

/// A matrix read from a slice through element strides: element `(r, c)` is
/// `data[r * rs + c * cs]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MatRef<'a, T> {
    pub(crate) data: &'a [T],
    pub(crate) rs: usize,
    pub(crate) cs: usize,
}

/// The element types `matrixmultiply` multiplies.
pub(crate) trait GemmElem: Copy + num_traits::Zero {
    /// `c = a · b` for an `m×k` `a`, a `k×n` `b` and a row-major `m×n` `c`, all extents ≥ 1;
    /// `a`, `b`, `c` are the first elements, the strides are those of [`MatRef`], and the caller
    /// has checked (see [`gemm`]) that every addressed element is in bounds.
    ///
    /// # Safety
    /// Every offset `r * rs + c * cs` of `a` (for `r < m`, `c < k`), of `b` (`r < k`, `c < n`) and
    /// `r * n + c` of `c` (`r < m`, `c < n`) must lie inside the allocation the pointer came from;
    /// `c` must not overlap `a` or `b`; strides must fit in `isize`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn raw_gemm(
        m: usize,
        k: usize,
        n: usize,
        a: *const Self,
        rsa: isize,
        csa: isize,
        b: *const Self,
        rsb: isize,
        csb: isize,
        c: *mut Self,
        rsc: isize,
    );
}

impl GemmElem for f32 {
    unsafe fn raw_gemm(
        m: usize,
        k: usize,
        n: usize,
        a: *const f32,
        rsa: isize,
        csa: isize,
        b: *const f32,
        rsb: isize,
        csb: isize,
        c: *mut f32,
        rsc: isize,
    ) {
        // SAFETY: forwarded from the caller's contract (see `GemmElem::raw_gemm`). With β = 0,
        // `c` is written without being read, so its prior contents do not matter.
        unsafe { matrixmultiply::sgemm(m, k, n, 1.0, a, rsa, csa, b, rsb, csb, 0.0, c, rsc, 1) }
    }
}

impl GemmElem for f64 {
    unsafe fn raw_gemm(
        m: usize,
        k: usize,
        n: usize,
        a: *const f64,
        rsa: isize,
        csa: isize,
        b: *const f64,
        rsb: isize,
        csb: isize,
        c: *mut f64,
        rsc: isize,
    ) {
        // SAFETY: as for f32 above.
        unsafe { matrixmultiply::dgemm(m, k, n, 1.0, a, rsa, csa, b, rsb, csb, 0.0, c, rsc, 1) }
    }
}

/// Checks that a `rows×cols` matrix with strides `(rs, cs)` fits in a slice of `len` elements
/// (the largest offset it addresses, `(rows-1)·rs + (cols-1)·cs`, is below `len`) and that both
/// strides fit in `isize`; returns them as `isize`. `rows` and `cols` are ≥ 1.
fn fits(
    what: &str,
    len: usize,
    rows: usize,
    cols: usize,
    rs: usize,
    cs: usize,
) -> Result<(isize, isize)> {
    let last = (rows - 1)
        .checked_mul(rs)
        .and_then(|r| (cols - 1).checked_mul(cs).and_then(|c| r.checked_add(c)));
    let strides = (isize::try_from(rs), isize::try_from(cs));
    match (last, strides) {
        (Some(last), (Ok(rs), Ok(cs))) if last < len => Ok((rs, cs)),
        _ => Err(KernelError::shape(
            "matmul",
            format!(
                "internal: {what} ({rows}x{cols}, strides {rs}, {cs}) does not fit its buffer of \
                 {len} elements"
            ),
        )),
    }
}

/// `c = a · b` for an `m×k` `a`, a `k×n` `b` and a row-major `m×n` `c` (`c.len() == m·n`).
/// Errors (never panics, never touches memory out of bounds) when a matrix does not fit its
/// slice; that would be a bug in the caller, not bad user input.
pub(crate) fn gemm<T: GemmElem>(
    m: usize,
    k: usize,
    n: usize,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    c: &mut [T],
) -> Result<()> {
    if m.checked_mul(n) != Some(c.len()) {
        return Err(KernelError::shape(
            "matmul",
            format!("internal: output buffer of {} elements for a {m}x{n} product", c.len()),
        ));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        // An empty sum: handled here so the GEMM never sees a zero extent.
        c.fill(T::zero());
        return Ok(());
    }
    let (rsa, csa) = fits("lhs", a.data.len(), m, k, a.rs, a.cs)?;
    let (rsb, csb) = fits("rhs", b.data.len(), k, n, b.rs, b.cs)?;
    let (rsc, _) = fits("output", c.len(), m, n, n, 1)?;
    // SAFETY:
    // - `a`: every offset the GEMM reads is `r·rsa + p·csa` with `r < m`, `p < k`, at most
    //   `(m-1)·rsa + (k-1)·csa`, which `fits` proved (with checked arithmetic) is below
    //   `a.data.len()`; likewise for `b` with `k×n`. The pointers come from live slices borrowed
    //   for the whole call.
    // - `c`: row-major `m×n` with strides `(n, 1)`: offsets up to `(m-1)·n + n-1 = m·n - 1`, and
    //   `c.len() == m·n` was checked above; distinct `(r, j)` give distinct offsets (`n ≥ 1`), so
    //   C's elements do not alias each other, as `matrixmultiply` requires.
    // - `c` is an exclusive borrow, so it cannot overlap `a` or `b` (shared borrows).
    // - All strides were converted to `isize` with `try_from` by `fits`.
    // - Extents are all ≥ 1 here (the zero cases returned above).
    unsafe {
        T::raw_gemm(
            m,
            k,
            n,
            a.data.as_ptr(),
            rsa,
            csa,
            b.data.as_ptr(),
            rsb,
            csb,
            c.as_mut_ptr(),
            rsc,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_product_and_transposed_reads() {
        // [[1, 2, 3], [4, 5, 6]] · [[7, 8], [9, 10], [11, 12]] = [[58, 64], [139, 154]].
        let a = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let b = [7.0f32, 8.0, 9.0, 10.0, 11.0, 12.0];
        let mut c = [f32::NAN; 4];
        gemm(2, 3, 2, MatRef { data: &a, rs: 3, cs: 1 }, MatRef { data: &b, rs: 2, cs: 1 }, &mut c)
            .unwrap();
        assert_eq!(c, [58.0, 64.0, 139.0, 154.0]);
        // bᵀ stored row-major as [2, 3], read with strides (1, 3).
        let bt = [7.0f64, 9.0, 11.0, 8.0, 10.0, 12.0];
        let a64 = a.map(f64::from);
        let mut c64 = [0.0f64; 4];
        gemm(
            2,
            3,
            2,
            MatRef { data: &a64, rs: 3, cs: 1 },
            MatRef { data: &bt, rs: 1, cs: 3 },
            &mut c64,
        )
        .unwrap();
        assert_eq!(c64, [58.0, 64.0, 139.0, 154.0]);
    }

    #[test]
    fn zero_extents_and_empty_sums() {
        let mut c = [f32::NAN; 6];
        gemm(
            2,
            0,
            3,
            MatRef { data: &[], rs: 0, cs: 1 },
            MatRef { data: &[], rs: 3, cs: 1 },
            &mut c,
        )
        .unwrap();
        assert_eq!(c, [0.0; 6]);
        let mut empty: [f32; 0] = [];
        let a = [1.0f32];
        gemm(
            0,
            1,
            5,
            MatRef { data: &a, rs: 1, cs: 1 },
            MatRef { data: &a, rs: 5, cs: 1 },
            &mut empty,
        )
        .unwrap();
    }

    #[test]
    fn out_of_bounds_descriptions_are_errors_not_reads() {
        let a = [1.0f32; 6];
        let mut c = [0.0f32; 4];
        // A 2x4 matrix cannot live in 6 elements.
        let r = gemm(
            2,
            4,
            2,
            MatRef { data: &a, rs: 4, cs: 1 },
            MatRef { data: &a, rs: 2, cs: 1 },
            &mut c,
        );
        assert!(r.is_err());
        // A stride that overflows.
        let r = gemm(
            2,
            3,
            2,
            MatRef { data: &a, rs: usize::MAX, cs: 1 },
            MatRef { data: &a, rs: 2, cs: 1 },
            &mut c,
        );
        assert!(r.is_err());
        // A wrong output length.
        let mut c3 = [0.0f32; 3];
        let r = gemm(
            2,
            3,
            2,
            MatRef { data: &a, rs: 3, cs: 1 },
            MatRef { data: &a, rs: 2, cs: 1 },
            &mut c3,
        );
        assert!(r.is_err());
    }
}
