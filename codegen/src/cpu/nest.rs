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
    /// The packed contraction ([`gemm`]); excludes `scratch`.
    pub(crate) gemm: Option<Gemm>,
}

impl Nest {
    /// The nest of `k` (checked against `types`): the packed contraction when the code
    /// generator has a register block (`shape`) and `k` is a contraction it can run
    /// ([`gemm`]), else the reduction interchange when it pays ([`interchange`]); the split
    /// dimension ([`split_dim`]).
    pub(crate) fn of(k: &Kernel, types: &[MemType], shape: Option<GemmShape>) -> Nest {
        if let Some(g) = shape.and_then(|s| gemm(k, types, s)) {
            return Nest { scratch: None, split: split_dim(k, None), gemm: Some(g) };
        }
        let scratch = interchange(k, types);
        Nest { scratch, split: split_dim(k, scratch), gemm: None }
    }

    /// The length in `f32` of the scratch array the native function takes after its operands
    /// (one per chunk), if any.
    pub(crate) fn scratch_len(&self) -> Option<u64> {
        match (self.gemm, self.scratch) {
            (Some(g), _) => Some(g.shape.scratch_len()),
            (None, s) => s.map(|(_, n)| n),
        }
    }
}

/// The blocking of a packed contraction, a property of the code generator: a register block of
/// `mr` rows by `vectors` vectors of `lanes` `f32` (`nr = vectors · lanes` columns) and cache
/// blocks of `mc` rows, `nc` columns and `kc` reduction steps (`mc` a multiple of `mr`, `nc` of
/// `nr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GemmShape {
    pub mr: u32,
    pub lanes: u32,
    pub vectors: u32,
    pub mc: u32,
    pub nc: u32,
    pub kc: u32,
}

impl GemmShape {
    /// Columns of the register block.
    pub fn nr(&self) -> u32 {
        self.lanes * self.vectors
    }

    /// Offsets in the scratch array of the packed `a` panel (`mc × kc`), the packed `b` panel
    /// (`kc × nc`), the accumulator tile (`mc × nc`) and the reduction steps' offsets of the
    /// operand being packed (`kc` `i32`s, see `Lower::pack_separable`), and its length.
    pub(crate) fn layout(&self) -> [u64; 5] {
        let (mc, nc, kc) = (u64::from(self.mc), u64::from(self.nc), u64::from(self.kc));
        let b = mc * kc;
        let c = b + kc * nc;
        let d = c + mc * nc;
        [0, b, c, d, d + kc]
    }

    fn scratch_len(&self) -> u64 {
        self.layout()[4]
    }

    /// Every size positive, `mc` a multiple of `mr` and `nc` of `nr`.
    fn is_valid(&self) -> bool {
        self.mr > 0
            && self.lanes > 0
            && self.vectors > 0
            && self.kc > 0
            && self.mc > 0
            && self.nc > 0
            && self.mc % self.mr == 0
            && self.nc % self.nr() == 0
    }
}

/// A contraction `out[.., I, .., J, ..] = epilogue(Σ_K a[I, K] · b[K, J])` (any maps) run as a
/// packed, register-blocked loop nest (see `Lower::gemm` in `crate::cpu::lower`). `I`, `J` and
/// `K` are groups of domain dimensions, each walked as one row-major index (the reduction's is
/// the order the plain nest combines in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gemm {
    /// The parallel dimensions only `a` reads (the rows `I`) and those only `b` reads (the
    /// columns `J`, the vector lanes), as bit masks of dimension numbers.
    pub(crate) i: u64,
    pub(crate) j: u64,
    /// The operands of the body's product (for a factor that is an expression, its largest
    /// operand), and whether `a` is its left factor.
    pub(crate) a: usize,
    pub(crate) b: usize,
    pub(crate) a_left: bool,
    /// Whether each factor is its operand read at its map; else it is an expression of
    /// operands and indices (a packed weight's decode), computed where it is packed.
    pub(crate) a_plain: bool,
    pub(crate) b_plain: bool,
    pub(crate) shape: GemmShape,
}

/// A factor of a packed contraction's product: its largest operand, every operand it reads,
/// the indices it reads itself, and whether it is one operand read at its map. `None` for an
/// expression that could fault (a data-dependent load, `int()`, a division by anything but a
/// non-zero constant) or reads no operand, an accumulator or a statistic.
fn factor(
    e: &fbc_dialects::memory::Scalar,
    types: &[MemType],
) -> Option<(usize, Vec<usize>, Vec<usize>, bool)> {
    use fbc_dialects::memory::{Scalar, ScalarBin, ScalarUn};
    let (mut operands, mut dims, mut ok) = (Vec::new(), Vec::new(), true);
    e.visit(&mut |s| match s {
        Scalar::In(o) if !operands.contains(o) => operands.push(*o),
        Scalar::Dim(d) => dims.push(*d),
        Scalar::Bin(ScalarBin::Div | ScalarBin::Rem, _, c) => {
            ok &= matches!(**c, Scalar::Int(v) if v != 0);
        }
        Scalar::Load(..) | Scalar::Acc | Scalar::Stat(_) | Scalar::Un(ScalarUn::ToInt, _) => {
            ok = false
        }
        _ => {}
    });
    let elems = |o: usize| types.get(o).map_or(0, MemType::elems);
    let primary = operands.iter().copied().max_by_key(|&o| (elems(o), std::cmp::Reverse(o)))?;
    let plain = matches!(e, Scalar::In(_));
    (ok && operands.iter().all(|&o| o < types.len())).then_some((primary, operands, dims, plain))
}

/// The dimensions of bit mask `mask`, in order.
pub(crate) fn dims_of(mask: u64) -> impl Iterator<Item = usize> {
    (0..64).filter(move |&d| mask & (1u64 << d) != 0)
}

/// The packed contraction of `k` (checked against `types`) with register block `shape`, when
/// it computes exactly what the plain nest does, bit for bit, and pays: the body is `x · y` of
/// two `f32` operands combined by `add` over reduction dimensions (at least 8 points in all,
/// the whole domain fewer than 2^63), without guard, symbols or statistics; parallel dimensions read by `x` only and others by `y`
/// only (at least 8 points each way: the two groups `I` and `J`; the other parallel dimensions
/// loop outside, like a batch); every access proven in range by the bounds prover
/// ([`Kernel::bounds`]) and an epilogue that cannot fail, so that no launch can fault (whose first fault
/// would depend on the order of the points). Each output element is still the sum of its
/// products in reduction order from the identity; only which elements are summed at once
/// changes (the lanes of a vector are distinct output elements).
pub(crate) fn gemm(k: &Kernel, types: &[MemType], shape: GemmShape) -> Option<Gemm> {
    use fbc_dialects::memory::{Combine, Scalar, ScalarBin, ScalarUn};
    let np = k.parallel_dims();
    let rank = k.domain.len();
    let points = |dims: &mut dyn Iterator<Item = usize>| -> u64 {
        dims.map(|d| k.domain[d]).fold(1, u64::saturating_mul)
    };
    if !shape.is_valid()
        || k.combine != Some(Combine::Add)
        || np == 0
        || rank == np
        || rank > 64
        || k.guard.is_some()
        || !k.symbols.is_empty()
        || !k.stats.is_empty()
        || k.attention.is_some()
        || points(&mut (np..rank)) < 8
        || k.domain.contains(&0)
        // Every group's points, walked as one index, fit in `i64`.
        || k.domain.iter().try_fold(1u64, |a, &n| a.checked_mul(n)).is_none_or(|p| p > i64::MAX as u64)
    {
        return None;
    }
    let Scalar::Bin(ScalarBin::Mul, x, y) = &k.body else { return None };
    let (fx, fy) = (factor(x, types)?, factor(y, types)?);
    let float = |o: usize| types.get(o).is_some_and(|t| t.elem != fbc_ir::ElemType::I32);
    let (x, y) = (fx.0, fy.0);
    if fx.1.iter().any(|o| fy.1.contains(o))
        || !fx.1.iter().chain(&fy.1).all(|&o| float(o))
        || fx.1.contains(&k.output())
        || fy.1.contains(&k.output())
        || !float(k.output())
    {
        return None;
    }
    if let Some(e) = &k.epilogue {
        let mut fails = false;
        e.visit(&mut |s| {
            fails |= matches!(
                s,
                Scalar::Load(..)
                    | Scalar::Un(ScalarUn::ToInt, _)
                    | Scalar::Bin(ScalarBin::Div | ScalarBin::Rem, ..)
                    | Scalar::Int(_)
                    | Scalar::Dim(_)
            );
        });
        if fails {
            return None;
        }
    }
    // The dialect's bounds prover (branch and bound: it proves the R-Tile maps whose interval
    // over the whole domain leaves the texture).
    if k.bounds(types).any_checked() {
        return None;
    }
    let map_reads = |o: usize, d: usize| {
        let map = &k.maps[o];
        map.dims.get(d).is_some_and(|name| map.results.iter().any(|e| e.vars().contains(name)))
    };
    // A factor reads a dimension through one of its operands' maps or itself.
    let reads = |f: &(usize, Vec<usize>, Vec<usize>, bool), d: usize| {
        f.2.contains(&d) || f.1.iter().any(|&o| map_reads(o, d))
    };
    if !(np..rank).any(|d| reads(&fx, d)) || !(np..rank).any(|d| reads(&fy, d)) {
        return None;
    }
    let only = |f, other| {
        (0..np).filter(|&d| reads(f, d) && !reads(other, d)).fold(0u64, |m, d| m | 1 << d)
    };
    let (gx, gy) = (only(&fx, &fy), only(&fy, &fx));
    // The columns: the group with the innermost parallel dimension (the output's contiguous
    // one in the usual row-major layouts).
    let (a, b, i, j) = if gx & (1 << (np - 1)) != 0 { (y, x, gy, gx) } else { (x, y, gx, gy) };
    let (a_plain, b_plain) = if a == x { (fx.3, fy.3) } else { (fy.3, fx.3) };
    if points(&mut dims_of(i)) < 8 || points(&mut dims_of(j)) < 8 {
        return None;
    }
    // Few rows (up to four row blocks): one row block holds them all, so that each panel of
    // `b` is packed once instead of once per row block (a 128-row product of a 8192 × 2048
    // weight packed it twice).
    let m = points(&mut dims_of(i));
    let shape = if m <= 4 * u64::from(shape.mc) {
        let mr = u64::from(shape.mr);
        GemmShape { mc: u32::try_from(m.div_ceil(mr) * mr).ok()?, ..shape }
    } else {
        shape
    };
    Some(Gemm { i, j, a, b, a_left: a == x, a_plain, b_plain, shape })
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
    // A reduction with statistics computes them per point before its own sum (`Lower::compute`).
    if k.combine.is_none()
        || !k.stats.is_empty()
        || np == 0
        || np == rank
        || k.guard.is_some()
        || k.domain.contains(&0)
    {
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
