//! Which allocations need their zero fill: the read-before-write analysis behind "a fresh
//! `memory.alloc` is zero-filled".
//!
//! The semantics say every element of a new allocation is 0 until written. Filling costs a pass
//! over the storage on every run, so a back end whose allocations start out undefined (OpenCL)
//! fills only the allocations that [`allocs_to_fill`] returns: those whose contents *may be read*
//! before every element has been written. Walking the schedule from the `memory.alloc`:
//!
//! - a `memory.launch` that reads the storage as an input at an element not yet known to be
//!   written, or reads it while some element is not known to be written through `xN` / `xN[e]`
//!   (the output before the launch) or a gather (`xN[e]` of an input), needs the fill, as does a
//!   `memory.download` or any other op using it. An input's reads are known when its map uses no
//!   symbols (it may name them) and the dimensions it mentions span at most [`ENUMERATE_LIMIT`]
//!   points: they are enumerated (a decode step's activations, one row of an R-Tile image whose
//!   other three rows are padding, are read only where written, and need no fill), at the points
//!   where the launch's guard holds when it reads parallel dimensions only (the payload runs only
//!   there);
//! - a `memory.launch` writing it adds the element offsets its output map reaches over the
//!   parallel sub-domain (every parallel point writes: a failed guard stores 0; an empty parallel
//!   sub-domain writes nothing) to the elements known to be written;
//! - once every element is written, or at its `memory.dealloc` or the end of the function, no
//!   fill is needed.
//!
//! The written elements of one launch are known when its output map is affine in the parallel
//! dimensions with mixed-radix coefficients (sorted by magnitude, the smallest is 1 and each next
//! is the previous times the previous extent, as a row-major map over the domain has): the
//! offsets are then exactly one interval. Any other map is evaluated point by point when the
//! parallel sub-domain has at most [`ENUMERATE_LIMIT`] points; otherwise its writes are ignored
//! (the analysis stays sound: it can only ask for a fill that is not needed).

use fbc_index::{Expr, IndexMap};
use fbc_ir::attr::BinOp;
use fbc_ir::{FuncId, Module, Value};

use super::kernel::{Kernel, MemType, Scalar, StorageKind};
use crate::layout::{eval_map, MapEval};

/// Largest parallel sub-domain whose output offsets are enumerated point by point when the
/// output map is not mixed-radix affine.
pub const ENUMERATE_LIMIT: u64 = 1 << 16;

/// The `memory.alloc` results of `f` whose storage may be read before it is fully written, in
/// schedule order: the ones a back end without zeroed allocations must fill with zeros.
pub fn allocs_to_fill(m: &Module, f: FuncId) -> Vec<Value> {
    let body = &m.func(f).body;
    let mut fills = Vec::new();
    for (i, &op) in body.iter().enumerate() {
        let d = m.op(op);
        if !d.def.is("memory.alloc") {
            continue;
        }
        for &v in &d.results {
            let Some(t) = MemType::from_type(m.value_type(v)) else { continue };
            if read_before_written(m, &body[i + 1..], v, t) {
                fills.push(v);
            }
        }
    }
    fills
}

/// Whether storage `v` of type `t`, fresh before `ops`, may be read before every element of it is
/// written.
fn read_before_written(m: &Module, ops: &[fbc_ir::Op], v: Value, t: MemType) -> bool {
    let elems = t.elems();
    let mut written = Intervals::default();
    for &op in ops {
        if written.covers(elems) {
            return false;
        }
        let d = m.op(op);
        if !d.operands.contains(&v) {
            continue;
        }
        match d.name() {
            "memory.dealloc" => return false,
            "memory.launch" => {
                let Ok(k) = Kernel::from_op(d) else { return true };
                let out = d.operands.len() - 1;
                let mut inputs = d.operands[..out].iter().enumerate().filter(|&(_, &o)| o == v);
                if !inputs.all(|(i, _)| reads_within(&k, i, t, &written)) {
                    return true;
                }
                if reads_output(&k) {
                    return true;
                }
                if d.operands[out] == v {
                    for (a, b) in written_intervals(&k, t).unwrap_or_default() {
                        written.add(a, b);
                    }
                }
            }
            _ => return true,
        }
    }
    // Never read again (or only after it is fully written).
    false
}

/// Whether launch `k` reads its input `i` (storage of type `t`) only at offsets in `written`:
/// through its map (no gather of it), over the dimensions the map mentions, enumerated (see the
/// module doc). `false` when that is not known.
fn reads_within(k: &Kernel, i: usize, t: MemType, written: &Intervals) -> bool {
    if k.domain.contains(&0) {
        return true;
    }
    let mut gathered = false;
    for e in k.payloads() {
        e.visit(&mut |s: &Scalar| gathered |= matches!(s, Scalar::Load(j, _) if *j == i));
    }
    let Some(map) = k.maps.get(i).filter(|m| !gathered && m.dims.len() == k.domain.len()) else {
        return false;
    };
    // A map may name the launch's symbols without using them (every map of an attention
    // launch names its causal position): the reads are then known all the same.
    if map.results.iter().any(|r| map.symbols.iter().any(|s| mentions(r, s))) {
        return false;
    }
    let unnamed;
    let map = if map.symbols.is_empty() {
        map
    } else {
        unnamed = IndexMap { symbols: Vec::new(), ..map.clone() };
        &unnamed
    };
    // The payload runs only where the guard holds (elsewhere the output is 0): a guard over
    // parallel dimensions narrows the reads (a matrix-vector product over the padding rows of
    // an R-Tile image reads its vector at the real row only).
    let np = k.parallel_dims();
    let mentioned = |m: &IndexMap, d: usize| m.results.iter().any(|r| mentions(r, &m.dims[d]));
    let guard = k.guard.as_ref().filter(|g| {
        g.map.symbols.is_empty() && (np..g.map.dims.len()).all(|d| !mentioned(&g.map, d))
    });
    let used: Vec<usize> = (0..map.dims.len())
        .filter(|&d| mentioned(map, d) || guard.is_some_and(|g| mentioned(&g.map, d)))
        .collect();
    let points = used.iter().try_fold(1u64, |a, &d| a.checked_mul(k.domain[d]));
    let Some(points) = points.filter(|&p| p <= ENUMERATE_LIMIT) else { return false };
    let mut idx = vec![0i64; k.domain.len()];
    for _ in 0..points {
        let holds = match guard {
            Some(g) => match eval_map(&g.map, &idx) {
                MapEval::Ok(r) => r.iter().zip(&g.bounds).all(|(&v, &b)| 0 <= v && (v as u64) < b),
                _ => return false,
            },
            None => true,
        };
        if holds {
            let MapEval::Ok(r) = eval_map(map, &idx) else { return false };
            match offset(&r, t) {
                Some(o) if u64::try_from(o).is_ok_and(|o| written.contains(o)) => {}
                _ => return false,
            }
        }
        // The next point over the mentioned dimensions, row-major.
        for &j in used.iter().rev() {
            idx[j] += 1;
            if (idx[j] as u64) < k.domain[j] {
                break;
            }
            idx[j] = 0;
        }
    }
    true
}

/// Whether the payload (body, epilogue, statistics) reads the output operand: `xN` or `xN[e]`. Those reads
/// see the contents before the launch.
pub fn reads_output(k: &Kernel) -> bool {
    let out = k.output();
    let mut found = false;
    let mut visit =
        |s: &Scalar| found |= matches!(s, Scalar::In(j) | Scalar::Load(j, _) if *j == out);
    for e in k.payloads() {
        e.visit(&mut visit);
    }
    found
}

/// The element offsets (`(y·W + x)·4 + c` for an image) that launch `k` certainly writes into its
/// output of type `t`, as sorted disjoint half-open intervals clipped to the storage; `None` when
/// they are not known (see the module doc).
pub fn written_intervals(k: &Kernel, t: MemType) -> Option<Vec<(u64, u64)>> {
    // The dimensions of an output point: a row kernel writes at every row point too.
    let np = k.point_dims();
    let par = &k.domain[..np];
    if par.contains(&0) {
        return Some(Vec::new());
    }
    let map = k.maps.last()?;
    // Where a map that uses its symbols writes is known only when the launch runs (a map may
    // name the launch's symbols without using them: an attention launch's output).
    if map.results.iter().any(|r| map.symbols.iter().any(|s| mentions(r, s))) {
        return None;
    }
    let elems = t.elems();
    let clip = |lo: i128, hi: i128| -> Vec<(u64, u64)> {
        let (lo, hi) = (lo.max(0), hi.min(i128::from(elems)));
        if lo < hi {
            vec![(lo as u64, hi as u64)]
        } else {
            Vec::new()
        }
    };
    if let Some((lo, hi)) = mixed_radix(map, k, t) {
        return Some(clip(lo, hi));
    }
    let points = par.iter().try_fold(1u64, |a, &e| a.checked_mul(e))?;
    if points > ENUMERATE_LIMIT {
        return None;
    }
    // A map that moves with a reduction index is not one write per point: unknown.
    let reduction_dims = map.dims.iter().zip(&k.domain).skip(np).filter(|&(_, &e)| e > 1);
    if reduction_dims.into_iter().any(|(d, _)| map.results.iter().any(|r| mentions(r, d))) {
        return None;
    }
    let mut offs = Vec::with_capacity(points as usize);
    let mut idx = vec![0i64; k.domain.len()];
    for _ in 0..points {
        if let MapEval::Ok(r) = eval_map(map, &idx) {
            if let Some(o) = offset(&r, t) {
                if (0..elems as i128).contains(&o) {
                    offs.push(o as u64);
                }
            }
        }
        // Next parallel point, row-major (reduction indices stay 0).
        for j in (0..np).rev() {
            idx[j] += 1;
            if (idx[j] as u64) < par[j] {
                break;
            }
            idx[j] = 0;
        }
    }
    offs.sort_unstable();
    offs.dedup();
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for o in offs {
        match runs.last_mut() {
            Some((_, hi)) if *hi == o => *hi += 1,
            _ => runs.push((o, o + 1)),
        }
    }
    Some(runs)
}

/// The element offset of a map result: the buffer offset, or `(y·W + x)·4 + c` for an image
/// (`None` for coordinates outside the image).
fn offset(r: &[i64], t: MemType) -> Option<i128> {
    match (t.storage, r) {
        (StorageKind::Buffer { .. }, [o]) => Some(i128::from(*o)),
        (StorageKind::Image { width, height }, [x, y, c]) => {
            let (w, h) = (i128::from(width), i128::from(height));
            let (x, y, c) = (i128::from(*x), i128::from(*y), i128::from(*c));
            ((0..w).contains(&x) && (0..h).contains(&y) && (0..4).contains(&c))
                .then_some((y * w + x) * 4 + c)
        }
        _ => None,
    }
}

/// The interval `[lo, hi)` of offsets written when the output map's offset is
/// `c0 + Σ c_i·d_i` over the parallel dimensions with mixed-radix coefficients (then every point
/// of the interval is written exactly once). For an image, `x`, `y` and `c` must each be affine
/// with `0 <= x < W`, `0 <= y < H` and `0 <= c < 4` over the whole domain (so that the offset is
/// the affine `(y·W + x)·4 + c`).
fn mixed_radix(map: &IndexMap, k: &Kernel, t: MemType) -> Option<(i128, i128)> {
    let n = k.domain.len();
    let np = k.point_dims();
    let mut forms: Vec<(Vec<i128>, i128)> =
        map.results.iter().map(|e| affine_form(e, &map.dims)).collect::<Option<_>>()?;
    for (c, _) in &mut forms {
        if c.len() != n {
            return None;
        }
        // An index of extent 1 (or an empty reduction's) is always 0 where the output is written.
        for (ci, &e) in c.iter_mut().zip(&k.domain) {
            if e <= 1 {
                *ci = 0;
            }
        }
        // The output map must not move with the reduction indices.
        if c[np..].iter().any(|&ci| ci != 0) {
            return None;
        }
    }
    // The lowest and highest value of a form over the domain.
    let range = |(c, c0): &(Vec<i128>, i128)| -> Option<(i128, i128)> {
        let (mut lo, mut hi) = (*c0, *c0);
        for (ci, &e) in c.iter().zip(&k.domain) {
            let span = ci.checked_mul(i128::from(e.max(1)) - 1)?;
            if span < 0 {
                lo = lo.checked_add(span)?;
            } else {
                hi = hi.checked_add(span)?;
            }
        }
        Some((lo, hi))
    };
    let (coef, c0) = match t.storage {
        StorageKind::Buffer { .. } => forms.into_iter().next()?,
        StorageKind::Image { width, height } => {
            let [x, y, c] = &forms[..] else { return None };
            for (f, ext) in [(x, width), (y, height), (c, 4)] {
                let (lo, hi) = range(f)?;
                if lo < 0 || hi >= i128::from(ext) {
                    return None;
                }
            }
            // Every coefficient is now below the extent of its coordinate: no overflow.
            let w = i128::from(width);
            let coef = (0..n).map(|i| (y.0[i] * w + x.0[i]) * 4 + c.0[i]).collect();
            (coef, (y.1 * w + x.1) * 4 + c.1)
        }
    };
    let (lo, _) = range(&(coef.clone(), c0))?;
    let mut terms: Vec<(i128, i128)> = coef[..np]
        .iter()
        .zip(&k.domain[..np])
        .filter(|&(&c, _)| c != 0)
        .map(|(&c, &e)| (c.abs(), i128::from(e)))
        .collect();
    terms.sort_unstable();
    let mut next = 1i128;
    for &(c, e) in &terms {
        if c != next {
            return None;
        }
        next = next.checked_mul(e)?;
    }
    Some((lo, lo.checked_add(next)?))
}

/// `e` as `Σ c_i·dims[i] + c0` (`None` when it is not affine: `floordiv`, `ceildiv`, `mod`, a
/// product of two dimensions, or an unknown name).
fn affine_form(e: &Expr, dims: &[String]) -> Option<(Vec<i128>, i128)> {
    let n = dims.len();
    Some(match e {
        Expr::Var(v) => {
            let mut c = vec![0; n];
            c[dims.iter().position(|d| d == v)?] = 1;
            (c, 0)
        }
        Expr::Const(v) => (vec![0; n], i128::from(*v)),
        Expr::Neg(a) => {
            let (c, c0) = affine_form(a, dims)?;
            (c.into_iter().map(|x| -x).collect(), -c0)
        }
        Expr::Bin(op, a, b) => {
            let (ca, a0) = affine_form(a, dims)?;
            let (cb, b0) = affine_form(b, dims)?;
            let konst = |c: &[i128]| c.iter().all(|&x| x == 0);
            let scale = |c: &[i128], k: i128| -> Option<Vec<i128>> {
                c.iter().map(|x| x.checked_mul(k)).collect()
            };
            let zip = |f: fn(i128, i128) -> Option<i128>| -> Option<Vec<i128>> {
                ca.iter().zip(&cb).map(|(&x, &y)| f(x, y)).collect()
            };
            match op {
                BinOp::Add => (zip(i128::checked_add)?, a0.checked_add(b0)?),
                BinOp::Sub => (zip(i128::checked_sub)?, a0.checked_sub(b0)?),
                BinOp::Mul if konst(&cb) => (scale(&ca, b0)?, a0.checked_mul(b0)?),
                BinOp::Mul if konst(&ca) => (scale(&cb, a0)?, a0.checked_mul(b0)?),
                _ => return None,
            }
        }
    })
}

/// Whether `e` mentions variable `v`.
fn mentions(e: &Expr, v: &str) -> bool {
    match e {
        Expr::Var(x) => x == v,
        Expr::Const(_) => false,
        Expr::Neg(a) => mentions(a, v),
        Expr::Bin(_, a, b) => mentions(a, v) || mentions(b, v),
    }
}

/// Sorted disjoint half-open intervals.
#[derive(Debug, Default)]
struct Intervals(Vec<(u64, u64)>);

impl Intervals {
    fn add(&mut self, lo: u64, hi: u64) {
        if lo >= hi {
            return;
        }
        self.0.push((lo, hi));
        self.0.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(self.0.len());
        for &(a, b) in &self.0 {
            match merged.last_mut() {
                Some((_, h)) if a <= *h => *h = (*h).max(b),
                _ => merged.push((a, b)),
            }
        }
        self.0 = merged;
    }

    /// Whether offset `o` is in an interval.
    fn contains(&self, o: u64) -> bool {
        let k = self.0.partition_point(|&(lo, _)| lo <= o);
        k > 0 && o < self.0[k - 1].1
    }

    /// Whether `[0, n)` is covered.
    fn covers(&self, n: u64) -> bool {
        n == 0 || matches!(self.0.first(), Some(&(0, h)) if h >= n)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use fbc_ir::{Module, SourceFile};

    use super::*;

    fn parse(text: &str) -> Module {
        let file = Arc::new(SourceFile::new("t.fbir", text));
        fbc_ir::parse_module(&file, &crate::registry()).unwrap_or_else(|d| panic!("{d:?}"))
    }

    /// The names of the allocations of `@f` that need a fill, for `body` (with `%o` downloaded
    /// at the end).
    fn fills(allocs: &str, body: &str) -> Vec<String> {
        let text = format!(
            "func.func @f() -> tensor<24xf32> {{\n{allocs}\n{body}\n  %y = memory.download %o {{layout = #layout.linear}} : (!memory.buffer<24, f32>) -> tensor<24xf32>\n  func.return %y : tensor<24xf32>\n}}\n"
        );
        let m = parse(&text);
        let f = m.find_func("f").expect("@f");
        allocs_to_fill(&m, f)
            .into_iter()
            .map(|v| m.value(v).name.as_deref().unwrap_or_default().to_string())
            .collect()
    }

    const O: &str = "  %o = memory.alloc : () -> !memory.buffer<24, f32>";
    const T: &str = "(!memory.buffer<24, f32>) -> ()";

    fn launch(domain: &str, iters: &str, map: &str, extra: &str) -> String {
        format!(
            "  memory.launch %o {{kernel = \"k\", domain = {domain}, iterators = {iters}, maps = [{map}], body = \"1.0\"{extra}}} : {T}"
        )
    }

    #[test]
    fn a_row_major_writer_covers_its_output() {
        // Row-major, transposed and reversed strides are all mixed radix.
        for map in [
            "(d0, d1) -> (d0 * 6 + d1)",
            "(d0, d1) -> (d1 * 4 + d0)",
            "(d0, d1) -> (23 - d0 * 6 - d1)",
        ] {
            let l = launch("[4, 6]", "[\"parallel\", \"parallel\"]", map, "");
            assert_eq!(fills(O, &l), Vec::<String>::new(), "{map}");
        }
    }

    #[test]
    fn reads_and_partial_writes_need_the_fill() {
        // Nothing writes it.
        assert_eq!(fills(O, ""), ["o"]);
        // Half of it, strided.
        let l = launch("[12]", "[\"parallel\"]", "(d0) -> (d0 * 2)", "");
        assert_eq!(fills(O, &l), ["o"]);
        // A gap: stride 6 over 4 rows of 5.
        let l = launch("[4, 5]", "[\"parallel\", \"parallel\"]", "(d0, d1) -> (d0 * 6 + d1)", "");
        assert_eq!(fills(O, &l), ["o"]);
        // An empty parallel domain writes nothing.
        let l = launch("[0, 24]", "[\"parallel\", \"parallel\"]", "(d0, d1) -> (d1)", "");
        assert_eq!(fills(O, &l), ["o"]);
        // The writer reads its output first.
        let l = "  memory.launch %o {kernel = \"k\", domain = [24], iterators = [\"parallel\"], maps = [(d0) -> (d0)], body = \"x0 + 1.0\"} : (!memory.buffer<24, f32>) -> ()";
        assert_eq!(fills(O, l), ["o"]);
    }

    #[test]
    fn reads_of_written_elements_alone_need_no_fill() {
        // `%o` is written in full; `%p`'s first 12 elements are written, then read.
        let p = "  %p = memory.alloc : () -> !memory.buffer<24, f32>";
        let write_p = "  memory.launch %p {kernel = \"w\", domain = [12], iterators = [\"parallel\"], maps = [(d0) -> (d0)], body = \"1.0\"} : (!memory.buffer<24, f32>) -> ()";
        let read = |map: &str, body: &str| {
            format!("  memory.launch %p, %o {{kernel = \"r\", domain = [24, 12], iterators = [\"parallel\", \"reduction\"], maps = [{map}, (d0, d1) -> (d0)], body = \"{body}\", combine = \"add\"}} : (!memory.buffer<24, f32>, !memory.buffer<24, f32>) -> ()")
        };
        // Read at d1 < 12 only (the map does not mention d0): no fill.
        let l = read("(d0, d1) -> (d1)", "x0");
        assert_eq!(fills(&format!("{O}\n{p}"), &format!("{write_p}\n{l}")), Vec::<String>::new());
        // Read at 12 + d1: unwritten elements, the fill.
        let l = read("(d0, d1) -> (d1 + 12)", "x0");
        assert_eq!(fills(&format!("{O}\n{p}"), &format!("{write_p}\n{l}")), ["p"]);
        // A gather of it may read anywhere: the fill.
        let l = read("(d0, d1) -> (d1)", "x0[d1]");
        assert_eq!(fills(&format!("{O}\n{p}"), &format!("{write_p}\n{l}")), ["p"]);
    }

    #[test]
    fn reads_under_a_guard_happen_only_where_it_holds() {
        // `%p`'s first 12 elements are written; a launch over 2 × 12 rows-by-columns reads row
        // d0 of it (`d0 * 12 + d1`), but its guard `d0 < 1` keeps row 1 (the padding) unread
        // (and writes 0 there).
        let p = "  %p = memory.alloc : () -> !memory.buffer<24, f32>";
        let write_p = "  memory.launch %p {kernel = \"w\", domain = [12], iterators = [\"parallel\"], maps = [(d0) -> (d0)], body = \"1.0\"} : (!memory.buffer<24, f32>) -> ()";
        let read = |guard: &str| {
            format!("  memory.launch %p, %o {{kernel = \"r\", domain = [2, 12, 1], iterators = [\"parallel\", \"parallel\", \"reduction\"], maps = [(d0, d1, d2) -> (d0 * 12 + d1 + d2), (d0, d1, d2) -> (d0 * 12 + d1)], body = \"x0\", combine = \"add\"{guard}}} : (!memory.buffer<24, f32>, !memory.buffer<24, f32>) -> ()")
        };
        let guarded = read(", guard = (d0, d1, d2) -> (d0), guard_bounds = [1]");
        assert_eq!(
            fills(&format!("{O}\n{p}"), &format!("{write_p}\n{guarded}")),
            Vec::<String>::new()
        );
        assert_eq!(fills(&format!("{O}\n{p}"), &format!("{write_p}\n{}", read(""))), ["p"]);
        // A guard that reads the reduction dimension is not used: the fill.
        let on_k = read(", guard = (d0, d1, d2) -> (d0 + d2), guard_bounds = [1]");
        assert_eq!(fills(&format!("{O}\n{p}"), &format!("{write_p}\n{on_k}")), ["p"]);
    }

    #[test]
    fn interleaved_and_enumerated_writes_cover_it() {
        // Even then odd elements.
        let even = launch("[12]", "[\"parallel\"]", "(d0) -> (d0 * 2)", "");
        let odd = launch("[12]", "[\"parallel\"]", "(d0) -> (d0 * 2 + 1)", "");
        assert_eq!(fills(O, &format!("{even}\n{odd}")), Vec::<String>::new());
        // A map with mod/floordiv, enumerated: a permutation of 0..24.
        let l = launch("[24]", "[\"parallel\"]", "(d0) -> ((d0 mod 4) * 6 + d0 floordiv 4)", "");
        assert_eq!(fills(O, &l), Vec::<String>::new());
        // An empty reduction still writes every parallel point (the identity, then epilogue).
        let l = launch(
            "[24, 0]",
            "[\"parallel\", \"reduction\"]",
            "(d0, d1) -> (d0)",
            ", combine = \"add\"",
        );
        assert_eq!(fills(O, &l), Vec::<String>::new());
    }

    #[test]
    fn a_symbol_the_output_map_does_not_use_leaves_its_writes_known() {
        let p = "  %p = memory.alloc : () -> !memory.buffer<1, i32>";
        let at = |map: &str| {
            format!(
                "  memory.launch %p, %o {{kernel = \"k\", domain = [20], iterators = [\"parallel\"], maps = [(d0)[s0] -> (0), {map}], body = \"1.0\", symbols = [[0, 0, 4]]}} : (!memory.buffer<1, i32>, !memory.buffer<24, f32>) -> ()"
            )
        };
        // All 24 elements by d0 + 4 over 20 points does not cover 0..4, whatever s0 is...
        assert_eq!(fills(&format!("{p}\n{O}"), &at("(d0)[s0] -> (d0 + s0)")), ["p", "o"]);
        // ...and a map that does not use s0 is known: 20 of 24 written, still a fill.
        assert_eq!(fills(&format!("{p}\n{O}"), &at("(d0)[s0] -> (d0)")), ["p", "o"]);
        let all = at("(d0)[s0] -> (d0)").replace("domain = [20]", "domain = [24]");
        assert_eq!(fills(&format!("{p}\n{O}"), &all), ["p"]);
    }

    /// An input map that names a symbol without using it (an attention launch's maps all name
    /// the causal position) has known reads: `%q`'s first 8 elements, all written, need no
    /// fill; reading 12 of them does, and so does a map that uses the symbol.
    #[test]
    fn a_symbol_an_input_map_does_not_use_leaves_its_reads_known() {
        let q = "  %p = memory.alloc : () -> !memory.buffer<1, i32>\n  %q = memory.alloc : () -> !memory.buffer<16, f32>\n  memory.launch %q {kernel = \"w\", domain = [8], iterators = [\"parallel\"], maps = [(d0) -> (d0)], body = \"1.0\"} : (!memory.buffer<16, f32>) -> ()";
        let read = |n: u64, map: &str| {
            format!(
                "{q}\n  memory.launch %p, %q, %o {{kernel = \"r\", domain = [24, {n}], iterators = [\"parallel\", \"reduction\"], maps = [(d0, d1)[s0] -> (0), {map}, (d0, d1)[s0] -> (d0)], body = \"x1\", combine = \"add\", symbols = [[0, 0, 4]]}} : (!memory.buffer<1, i32>, !memory.buffer<16, f32>, !memory.buffer<24, f32>) -> ()"
            )
        };
        assert_eq!(fills(O, &read(8, "(d0, d1)[s0] -> (d1)")), ["p"]);
        assert_eq!(fills(O, &read(12, "(d0, d1)[s0] -> (d1)")), ["p", "q"]);
        assert_eq!(fills(O, &read(8, "(d0, d1)[s0] -> (d1 + s0)")), ["p", "q"]);
    }

    #[test]
    fn image_offsets_follow_the_texel_order() {
        // A 3x2 image written texel by texel: (y·3 + x)·4 + c covers all 24 elements.
        let text = "func.func @f() -> (tensor<24xf32>, tensor<24xf32>) {
  %i = memory.alloc : () -> !memory.image2d<[3, 2], f32>
  memory.launch %i {kernel = \"k\", domain = [2, 3, 4], iterators = [\"parallel\", \"parallel\", \"parallel\"], maps = [(d0, d1, d2) -> (d1, d0, d2)], body = \"1.0\"} : (!memory.image2d<[3, 2], f32>) -> ()
  %j = memory.alloc : () -> !memory.image2d<[3, 2], f32>
  memory.launch %j {kernel = \"k\", domain = [1, 3, 4], iterators = [\"parallel\", \"parallel\", \"parallel\"], maps = [(d0, d1, d2) -> (d1, d0, d2)], body = \"1.0\"} : (!memory.image2d<[3, 2], f32>) -> ()
  %a = memory.alloc : () -> !memory.buffer<24, f32>
  memory.launch %i, %a {kernel = \"r\", domain = [24], iterators = [\"parallel\"], maps = [(d0) -> (d0 floordiv 4 mod 3, d0 floordiv 12, d0 mod 4), (d0) -> (d0)], body = \"x0\"} : (!memory.image2d<[3, 2], f32>, !memory.buffer<24, f32>) -> ()
  %b = memory.alloc : () -> !memory.buffer<24, f32>
  memory.launch %j, %b {kernel = \"r\", domain = [24], iterators = [\"parallel\"], maps = [(d0) -> (d0 floordiv 4 mod 3, d0 floordiv 12, d0 mod 4), (d0) -> (d0)], body = \"x0\"} : (!memory.image2d<[3, 2], f32>, !memory.buffer<24, f32>) -> ()
  %y = memory.download %a {layout = #layout.linear} : (!memory.buffer<24, f32>) -> tensor<24xf32>
  %z = memory.download %b {layout = #layout.linear} : (!memory.buffer<24, f32>) -> tensor<24xf32>
  func.return %y, %z : (tensor<24xf32>, tensor<24xf32>) -> ()
}
";
        let m = parse(text);
        let f = m.find_func("f").expect("@f");
        let names: Vec<String> = allocs_to_fill(&m, f)
            .into_iter()
            .map(|v| m.value(v).name.as_deref().unwrap_or_default().to_string())
            .collect();
        // `%j`'s launch writes only its first texel row.
        assert_eq!(names, ["j"]);
    }
}
