//! Conversions that move nothing: a copy kernel (`layout.convert`, `layout.assign`, or a
//! materialising copy) whose input and output storage have the same type and whose two maps
//! send every domain point to the same storage coordinates, so the output would be a bit-exact
//! copy of the input. Such a launch is dropped and its output storage becomes the input's.
//!
//! It happens where two layouts differ as attributes but not physically: the embedding table
//! converted from `#layout.linear` to an R-Tile whose image does not fit the target, stored as a
//! texel array in a buffer of the same order (`x1[d0 * 2048 + d1] = x0[d1 + d0 * 2048]`, a 1 GB
//! copy at Llama's full vocabulary).
//!
//! Maps are compared as linear forms (coefficients of the domain dimensions and a constant)
//! when every result is affine without division, else structurally; either proves equality, so
//! nothing is dropped on a guess.

use fbc_dialects::memory::{Iter, Kernel, Scalar};
use fbc_index::{Expr, IndexMap};
use fbc_ir::attr::BinOp;
use fbc_ir::Span;

use super::{Sid, StorageObj};

/// `Σ c_i·d_i + c` of a division-free affine expression over `dims`.
fn linear(e: &Expr, dims: &[String]) -> Option<(Vec<i128>, i128)> {
    Some(match e {
        Expr::Var(v) => {
            let i = dims.iter().position(|d| d == v)?;
            let mut c = vec![0; dims.len()];
            c[i] = 1;
            (c, 0)
        }
        Expr::Const(k) => (vec![0; dims.len()], i128::from(*k)),
        Expr::Neg(a) => {
            let (c, k) = linear(a, dims)?;
            (c.into_iter().map(|x| -x).collect(), -k)
        }
        Expr::Bin(op @ (BinOp::Add | BinOp::Sub), a, b) => {
            let (ca, ka) = linear(a, dims)?;
            let (cb, kb) = linear(b, dims)?;
            let s = if *op == BinOp::Add { 1 } else { -1 };
            (ca.iter().zip(&cb).map(|(x, y)| x + s * y).collect(), ka + s * kb)
        }
        Expr::Bin(BinOp::Mul, a, b) => {
            let (ca, ka) = linear(a, dims)?;
            let (cb, kb) = linear(b, dims)?;
            // One side must be a constant.
            if ca.iter().all(|&x| x == 0) {
                (cb.iter().map(|&y| ka.checked_mul(y)).collect::<Option<_>>()?, ka.checked_mul(kb)?)
            } else if cb.iter().all(|&y| y == 0) {
                (ca.iter().map(|&x| x.checked_mul(kb)).collect::<Option<_>>()?, ka.checked_mul(kb)?)
            } else {
                return None;
            }
        }
        Expr::Bin(..) => return None,
    })
}

/// Whether the two maps (over the same dimension names) are the same function.
pub(crate) fn same_map(a: &IndexMap, b: &IndexMap) -> bool {
    if a.dims != b.dims || a.results.len() != b.results.len() {
        return false;
    }
    a.results.iter().zip(&b.results).all(|(x, y)| {
        x == y
            || matches!(
                (linear(x, &a.dims), linear(y, &b.dims)),
                (Some(p), Some(q)) if p == q
            )
    })
}

/// Whether `k` copies operand 0 into operand 1 element for element at the same coordinates
/// of storage of one type, over as many points as the storage holds.
fn is_identity_copy(k: &Kernel, sids: &[Sid], storages: &[StorageObj]) -> bool {
    let [src, dst] = sids else { return false };
    let (s, d) = (&storages[*src], &storages[*dst]);
    let points: Option<u64> = k.domain.iter().try_fold(1u64, |a, &x| a.checked_mul(x));
    k.body == Scalar::In(0)
        && k.guard.is_none()
        && k.epilogue.is_none()
        && k.combine.is_none()
        && k.iterators.iter().all(|&i| i == Iter::Parallel)
        && src != dst
        && s.ty == d.ty
        && !d.uploaded()
        && points == Some(d.ty.elems())
        && same_map(&k.maps[0], &k.maps[1])
}

/// Drops every identity copy of `launches` whose output storage no other launch writes and
/// whose input no later launch writes, renaming the output storage to the input in the later
/// launches and in `results`. Returns how many were dropped.
pub(crate) fn drop_identity_copies(
    launches: &mut Vec<(Kernel, Vec<Sid>, Span)>,
    results: &mut [Sid],
    storages: &[StorageObj],
) -> usize {
    let writes = |ls: &[(Kernel, Vec<Sid>, Span)], s: Sid| {
        ls.iter().filter(|(_, sids, _)| sids.last() == Some(&s)).count()
    };
    let mut dropped = 0;
    let mut i = 0;
    while i < launches.len() {
        let (k, sids, _) = &launches[i];
        let candidate = is_identity_copy(k, sids, storages)
            && writes(launches, sids[1]) == 1
            && writes(&launches[i + 1..], sids[0]) == 0;
        if !candidate {
            i += 1;
            continue;
        }
        let (src, dst) = (sids[0], sids[1]);
        launches.remove(i);
        for (_, sids, _) in &mut launches[i..] {
            for s in sids.iter_mut().filter(|s| **s == dst) {
                *s = src;
            }
        }
        for s in results.iter_mut().filter(|s| **s == dst) {
            *s = src;
        }
        dropped += 1;
    }
    dropped
}

#[cfg(test)]
mod tests {
    use fbc_index::{BinOp, Expr, IndexMap};

    use super::same_map;

    fn d(i: usize) -> Expr {
        Expr::Var(format!("d{i}"))
    }
    fn c(k: i64) -> Expr {
        Expr::Const(k)
    }
    fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
        Expr::Bin(op, Box::new(a), Box::new(b))
    }
    fn map(rank: usize, results: Vec<Expr>) -> IndexMap {
        IndexMap { dims: (0..rank).map(|i| format!("d{i}")).collect(), symbols: vec![], results }
    }

    #[test]
    fn maps_equal_as_linear_forms_or_structurally() {
        use BinOp::{Add, FloorDiv, Mul, Sub};
        // d1 + d0 * 2048 and d0 * 2048 + d1: the embedding table's two maps.
        let a = map(2, vec![bin(Add, d(1), bin(Mul, d(0), c(2048)))]);
        let b = map(2, vec![bin(Add, bin(Mul, d(0), c(2048)), d(1))]);
        assert!(same_map(&a, &b));
        // 2 * (d0 + d1) - d1 = d0 * 2 + d1.
        let e = map(2, vec![bin(Sub, bin(Mul, c(2), bin(Add, d(0), d(1))), d(1))]);
        let f = map(2, vec![bin(Add, bin(Mul, d(0), c(2)), d(1))]);
        assert!(same_map(&e, &f));
        let g = map(2, vec![bin(Add, bin(Mul, d(0), c(2049)), d(1))]);
        assert!(!same_map(&a, &g));
        assert!(!same_map(&map(2, vec![d(0), d(1)]), &map(2, vec![d(1), d(0)])));
        // d0 * d1 is not linear and differs structurally from d1 * d0: not proven equal.
        assert!(!same_map(
            &map(2, vec![bin(Mul, d(0), d(1))]),
            &map(2, vec![bin(Mul, d(1), d(0))])
        ));
        // Divisions: equal only as written.
        let q4 = map(1, vec![bin(FloorDiv, d(0), c(4))]);
        assert!(same_map(&q4, &q4.clone()));
        assert!(!same_map(&q4, &map(1, vec![bin(FloorDiv, d(0), c(2))])));
    }
}
