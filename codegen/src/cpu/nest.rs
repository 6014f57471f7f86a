//! The loop-nest analysis both CPU back ends share: interval analysis of index maps (which
//! bounds checks can be left out, which output offsets a chunk of a split launch can write), the
//! dimension split over threads and the reduction interchange. Each back end emits the nest
//! this describes in its own IR; keeping the decisions here keeps their code the same shape and
//! their results bit-identical.

use fbc_dialects::memory::{Kernel, MemType, StorageKind};
use fbc_index::{Expr, IndexMap};
use fbc_ir::attr::BinOp;

/// The interval arithmetic of index maps is `fbc_index::Interval`'s: exact in `i128`, checked
/// against `i64` (`checked_*`), floor/ceil division and modulo with the positive part of the
/// divisor. Zero-extent dimensions never reach here (their kernels have no body).
pub(crate) use fbc_index::Interval as Iv;

/// Whether every value of `iv` lies in `[lo, hi]`.
pub(crate) fn within(iv: Iv, lo: i64, hi: i64) -> bool {
    iv.lo >= lo && iv.hi <= hi
}

/// The interval of `a op c` (`floordiv`, `ceildiv`, `mod`) for `a` in `ia` and a divisor in
/// `ic` (its positive part: the others fault before any use).
pub(crate) fn div_iv(op: BinOp, ia: Iv, ic: Iv) -> Iv {
    match op {
        BinOp::FloorDiv => ia.floordiv(ic),
        BinOp::CeilDiv => ia.ceildiv(ic),
        _ => ia.modulo(ic),
    }
}

/// The interval of map result `e` of `map` when its dimensions range over `ranges`, as the
/// generated code computes it (each back end's `Lower::affine`); `None` when a value could leave
/// `i64` (such a map is rejected at compile time) or `e` names an unknown dimension. A divisor that may be
/// non-positive is narrowed to its positive part: the code faults before using the others.
pub(crate) fn map_iv(e: &Expr, map: &IndexMap, ranges: &[Iv]) -> Option<Iv> {
    Some(match e {
        Expr::Var(name) => *ranges.get(var_index(map, name)?)?,
        Expr::Const(c) => Iv::point(*c),
        Expr::Neg(a) => map_iv(a, map, ranges)?.checked_neg()?,
        Expr::Bin(op, a, c) => {
            let ia = map_iv(a, map, ranges)?;
            let ic = map_iv(c, map, ranges)?;
            match op {
                BinOp::Add => ia.checked_add(ic)?,
                BinOp::Sub => ia.checked_sub(ic)?,
                BinOp::Mul => ia.checked_mul(ic)?,
                BinOp::FloorDiv | BinOp::CeilDiv | BinOp::Mod => {
                    if ic.hi <= 0 {
                        // Always undefined: the code faults before any use.
                        return None;
                    }
                    div_iv(*op, ia, ic)
                }
                // The IR's maps are affine (the verifier checks it).
                BinOp::Shl | BinOp::Shr | BinOp::And | BinOp::Min | BinOp::Max => return None,
            }
        }
    })
}

/// The position of variable `name` of `map` among its dimensions then its symbols (the order of
/// the ranges [`map_iv`] takes: the domain's, then the launch's symbols').
fn var_index(map: &IndexMap, name: &str) -> Option<usize> {
    map.dims
        .iter()
        .position(|d| d == name)
        .or_else(|| map.symbols.iter().position(|s| s == name).map(|j| map.dims.len() + j))
}

/// The element offsets operand `t` (map `map`) can be written at when the domain indices range
/// over `ranges`: an interval containing every in-range offset the map yields (an offset or
/// image coordinate outside the operand faults instead of being written). `None`: unknown, or
/// no offset can be in range.
pub(crate) fn write_span(map: &IndexMap, t: MemType, ranges: &[Iv]) -> Option<Iv> {
    let clamp = |iv: Iv, n: i64| Iv::new(0, n.checked_sub(1)?)?.intersect(iv);
    match t.storage {
        StorageKind::Buffer { .. } => {
            clamp(map_iv(map.results.first()?, map, ranges)?, i64::try_from(t.elems()).ok()?)
        }
        StorageKind::Image { width, height } => {
            let ext = [i64::try_from(width).ok()?, i64::try_from(height).ok()?, 4];
            let mut c = [Iv::point(0); 3];
            for i in 0..3 {
                c[i] = clamp(map_iv(map.results.get(i)?, map, ranges)?, ext[i])?;
            }
            // (y·W + x)·4 + c is increasing in each coordinate within its extent.
            let at = |x: i64, y: i64, ch: i64| {
                (i128::from(y) * i128::from(ext[0]) + i128::from(x)) * 4 + i128::from(ch)
            };
            Iv::exact(at(c[0].lo, c[1].lo, c[2].lo), at(c[0].hi, c[1].hi, c[2].hi))
        }
    }
}

/// The parallel dimension a launch is split along for threads: the outermost loop of the nest
/// (the first parallel dimension of extent > 1, not counting the accumulator dimension of an
/// interchanged reduction), so that chunks in order run the points in the single-threaded
/// order. `None` when every loop has one iteration.
pub(crate) fn split_dim(k: &Kernel, scratch: Option<(usize, u64)>) -> Option<usize> {
    (0..k.parallel_dims()).find(|&d| k.domain[d] > 1 && scratch.map(|(j, _)| j) != Some(d))
}

/// How the loop nest of a kernel is arranged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nest {
    /// The reduction interchange ([`interchange`]): the accumulator dimension and its extent.
    pub(crate) scratch: Option<(usize, u64)>,
    /// The dimension run over the caller's chunk ([`split_dim`]).
    pub(crate) split: Option<usize>,
}

impl Nest {
    /// The nest of `k` (checked against `types`): the reduction interchange when it pays
    /// ([`interchange`]) and the split dimension ([`split_dim`]).
    pub(crate) fn of(k: &Kernel, types: &[MemType]) -> Nest {
        let scratch = interchange(k, types);
        Nest { scratch, split: split_dim(k, scratch) }
    }
}

/// Whether to lower `k` with the reduction outside one parallel dimension `j` (see each back
/// end's `Lower::row`): `Some((j, extent of j))`, the extent being the number of accumulators.
/// Chosen when more inputs read with a stride (of more than 4 elements, a texel) along the
/// last reduction dimension than along `j`, `j` being the parallel dimension with the fewest
/// such inputs (the last one on ties, then the largest): a matmul `a[i, k] · b[k, j]` reads `b`
/// down a column in the plain order and along a row interchanged. Never with a guard (it is
/// per point).
pub(crate) fn interchange(k: &Kernel, types: &[MemType]) -> Option<(usize, u64)> {
    use fbc_dialects::layout::{eval_map, MapEval};
    let np = k.parallel_dims();
    let rank = k.domain.len();
    // An empty reduction has no loop to interchange.
    if k.combine.is_none() || np == 0 || np == rank || k.guard.is_some() || k.domain.contains(&0) {
        return None;
    }
    let r = rank - 1;
    if k.domain[r] < 2 {
        return None;
    }
    let strided = |d: usize| {
        let mut unit = vec![0i64; rank];
        unit[d] = 1;
        (0..k.output())
            .filter(|&m| {
                let (MapEval::Ok(a), MapEval::Ok(b)) =
                    (eval_map(&k.maps[m], &vec![0; rank]), eval_map(&k.maps[m], &unit))
                else {
                    return false;
                };
                let delta: Vec<i64> = a.iter().zip(&b).map(|(x, y)| y.saturating_sub(*x)).collect();
                let elems = match (types[m].storage, delta.as_slice()) {
                    (StorageKind::Image { width, .. }, [dx, dy, dc]) => dx
                        .saturating_mul(4)
                        .saturating_add(dy.saturating_mul((width as i64).saturating_mul(4)))
                        .saturating_add(*dc),
                    (_, [d]) => *d,
                    _ => 0,
                };
                elems.unsigned_abs() > 4
            })
            .count()
    };
    let along_r = strided(r);
    (0..np)
        .filter(|&d| (2..=1 << 16).contains(&k.domain[d]))
        .map(|d| (strided(d), d != np - 1, std::cmp::Reverse(k.domain[d]), d))
        .min()
        .filter(|&(s, ..)| along_r > s)
        .map(|(.., d)| (d, k.domain[d]))
}
