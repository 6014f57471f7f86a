//! Storage maps: logical index → storage coordinates, the image-output domain change, and the
//! egg simplification of the composed maps.
//!
//! - A linear buffer: the row-major offset `Σ i_k · stride_k`.
//! - An R-Tile (see `dialects/src/layout/attr.rs`): with `b` the linearised batch index, `(i, j)`
//!   the last two indices, tile `(a, c) = (i floordiv th, j floordiv tw)`, in-tile `(r, s) =
//!   (i mod th, j mod tw)`, footprint position `(fr, fc)` (`rows`: `(r, s)`; `block`: `((r
//!   floordiv bh)·(tw/bw) + s floordiv bw)·bh + r mod bh`, `s mod bw`), the texel is `x = col·fw +
//!   fc floordiv 4`, `y = row·fh + fr`, channel `fc mod 4`, where `(col, row)` is `(c, b·gh + a)`
//!   or, with the tile grid transposed (`horizontal = rank-2`), `(a, b·gw + c)`. In an image the
//!   map has the three results `(x, y, c)`; in a buffer the one result `(y·W + x)·4 + c`.
//! - A kernel writing an image iterates over its texels: the domain becomes `[H, W, 4,
//!   reductions...]` (dims `y, x, c`), every operand map is composed with the inverse map (texel →
//!   logical index), and a guard keeps the points that hold an element (`i < H`, `j < W`, the
//!   channel inside the tile's footprint), so padding is written as 0.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use fbc_dialects::kind::LayoutOp;
use fbc_dialects::layout::attr::CHANNELS;
use fbc_dialects::layout::{Intra, Layout, Matrix, Pack, RTile};
use fbc_dialects::memory::bounds::Ix;
use fbc_dialects::memory::{Attention, Guard, Iter, Kernel, Scalar, ScalarBin};
use fbc_index::{BinOp as IndexOp, Expr, IndexMap, Limits, Ranges};
use fbc_ir::{Diagnostic, Span};

use super::fusion::map_scalar;
use super::{compose, dim, identity, located, LKernel, Lower, Map, Operand, Sid};

fn c(v: u64) -> Expr {
    Expr::Const(v as i64)
}
fn add(a: Expr, b: Expr) -> Expr {
    match (&a, &b) {
        (Expr::Const(0), _) => b,
        (_, Expr::Const(0)) => a,
        _ => Expr::Bin(IndexOp::Add, Box::new(a), Box::new(b)),
    }
}
fn mul(a: Expr, k: u64) -> Expr {
    match (&a, k) {
        (_, 0) => Expr::Const(0),
        (_, 1) => a,
        (Expr::Const(0), _) => a,
        (Expr::Const(v), _) if v.checked_mul(k as i64).is_some() => Expr::Const(v * k as i64),
        _ => Expr::Bin(IndexOp::Mul, Box::new(a), Box::new(c(k))),
    }
}
fn fdiv(a: Expr, k: u64) -> Expr {
    if k == 1 {
        a
    } else {
        Expr::Bin(IndexOp::FloorDiv, Box::new(a), Box::new(c(k)))
    }
}
fn fmod(a: Expr, k: u64) -> Expr {
    if k == 1 {
        Expr::Const(0)
    } else {
        Expr::Bin(IndexOp::Mod, Box::new(a), Box::new(c(k)))
    }
}

/// Row-major offset of `idx` in `shape` (axes of extent 1 contribute nothing: their index is 0).
fn linear_offset(shape: &[u64], idx: &[Expr]) -> Expr {
    let mut strides = vec![1u64; shape.len()];
    for k in (0..shape.len().saturating_sub(1)).rev() {
        strides[k] = strides[k + 1].saturating_mul(shape[k + 1]);
    }
    let mut off = Expr::Const(0);
    for k in 0..shape.len() {
        if shape[k] != 1 {
            off = add(off, mul(idx[k].clone(), strides[k]));
        }
    }
    off
}

/// The texel `(x, y, c)` of logical index `idx` of a tensor of `shape` in R-Tile `r`.
fn rtile_texel(r: &RTile, shape: &[u64], idx: &[Expr]) -> [Expr; 3] {
    let n = shape.len();
    let m = Matrix::of(shape).unwrap_or(Matrix { batch: 1, h: 1, w: 1 });
    // `pack = "c"`: slice `o·⌈P/4⌉ + p floordiv 4` (`o` the axes before P), channel `p mod 4`.
    let (b, lane) = match r.pack {
        Pack::W => (linear_offset(&shape[..n - 2], &idx[..n - 2]), None),
        Pack::C => {
            let o = linear_offset(&shape[..n - 3], &idx[..n - 3]);
            let groups = shape[n - 3].div_ceil(CHANNELS);
            let p = &idx[n - 3];
            (add(mul(o, groups), fdiv(p.clone(), CHANNELS)), Some(fmod(p.clone(), CHANNELS)))
        }
    };
    let (i, j) = (idx[n - 2].clone(), idx[n - 1].clone());
    let [th, tw] = r.tile;
    let (a, cc) = (fdiv(i.clone(), th), fdiv(j.clone(), tw));
    let (rr, s) = (fmod(i, th), fmod(j, tw));
    let (fr, fc) = match r.intra {
        Intra::Rows => (rr, s),
        Intra::Block { bh, bw } => {
            let blk = add(mul(fdiv(rr.clone(), bh), tw / bw.max(1)), fdiv(s.clone(), bw));
            (add(mul(blk, bh), fmod(rr, bh)), fmod(s, bw))
        }
    };
    let (gh, gw) = r.grid(m);
    let (fh, fw) = r.footprint();
    let (col, row) = if r.horizontal as usize == n - 2 {
        (a, add(mul(b, gw), cc))
    } else {
        (cc, add(mul(b, gh), a))
    };
    let per = r.pack.per_texel();
    let x = add(mul(col, fw), fdiv(fc.clone(), per));
    let y = add(mul(row, fh), fr);
    [x, y, lane.unwrap_or_else(|| fmod(fc, CHANNELS))]
}

/// The inverse of [`rtile_texel`] on texel dims `(d0, d1, d2) = (y, x, c)`: the logical index,
/// and the guard `(i, j, fc)` with its bounds `(H, W, footprint columns holding elements)` —
/// with `pack = "c"`, `(i, j, p)` and `(H, W, P)`: the channels past `P` are padding.
fn rtile_inverse(r: &RTile, shape: &[u64]) -> (Map, Map, Vec<u64>) {
    let n = shape.len();
    let m = Matrix::of(shape).unwrap_or(Matrix { batch: 1, h: 1, w: 1 });
    let (y, x, ch) = (dim(0), dim(1), dim(2));
    let [th, tw] = r.tile;
    let (gh, gw) = r.grid(m);
    let (fh, fw) = r.footprint();
    let (row, fr) = (fdiv(y.clone(), fh), fmod(y, fh));
    let packed_c = r.pack == Pack::C;
    // The element column of the footprint: the texel column itself with `pack = "c"`.
    let fc = if packed_c {
        fmod(x.clone(), fw)
    } else {
        add(mul(fmod(x.clone(), fw), CHANNELS), ch.clone())
    };
    let col = fdiv(x, fw);
    let (b, a, cc) = if r.horizontal as usize == n - 2 {
        (fdiv(row.clone(), gw), col, fmod(row, gw))
    } else {
        (fdiv(row.clone(), gh), fmod(row, gh), col)
    };
    let (rr, s, width) = match r.intra {
        Intra::Rows => (fr, fc.clone(), tw),
        Intra::Block { bh, bw } => {
            let per = tw / bw.max(1);
            let blk = fdiv(fr.clone(), bh);
            let rr = add(mul(fdiv(blk.clone(), per), bh), fmod(fr, bh));
            let s = add(mul(fmod(blk, per), bw), fc.clone());
            (rr, s, bw)
        }
    };
    let i = add(mul(a, th), rr);
    let j = add(mul(cc, tw), s);
    let mut idx: Map = Vec::with_capacity(n);
    // With `pack = "c"` slice `b` is `o·⌈P/4⌉ + p floordiv 4`, and the channel completes `p`.
    let (b, lead, p) = if packed_c {
        let groups = shape[n - 3].div_ceil(CHANNELS);
        let p = add(mul(fmod(b.clone(), groups), CHANNELS), ch);
        (fdiv(b, groups), &shape[..n - 3], Some(p))
    } else {
        (b, &shape[..n - 2], None)
    };
    // Delinearise the batch index into the leading dims.
    let mut stride: u64 = lead.iter().product();
    for (k, &e) in lead.iter().enumerate() {
        stride /= e.max(1);
        let q = fdiv(b.clone(), stride);
        idx.push(if k == 0 { q } else { fmod(q, e) });
    }
    if let Some(p) = &p {
        idx.push(p.clone());
    }
    idx.push(i.clone());
    idx.push(j.clone());
    match p {
        Some(p) => (idx, vec![i, j, p], vec![m.h, m.w, shape[n - 3]]),
        None => (idx, vec![i, j, fc], vec![m.h, m.w, width]),
    }
}

/// Gives every image output a kernel that can write it: kernels writing an image whose output map
/// is not the identity, or images written by several kernels, write a linear temporary that one
/// copy kernel moves into the image.
pub(crate) fn retarget_images(l: &mut Lower<'_>) -> Result<(), Diagnostic> {
    let mut writers: HashMap<usize, Vec<usize>> = HashMap::new();
    for (i, k) in l.kernels.iter().enumerate() {
        writers.entry(k.out.t).or_default().push(i);
    }
    let mut fix: Vec<(usize, Vec<usize>)> = writers
        .into_iter()
        .filter(|(t, ks)| {
            let s = &l.storages[l.tensors[*t].storage];
            s.ty.is_image()
                && (ks.len() > 1 || l.kernels[ks[0]].out.map != identity(l.tensors[*t].shape.len()))
        })
        .collect();
    fix.sort_unstable();
    // Insert from the back so indices stay valid.
    fix.sort_by_key(|(_, ks)| std::cmp::Reverse(*ks.last().unwrap_or(&0)));
    for (t, ks) in fix {
        let shape = l.tensors[t].shape.clone();
        let elem = l.tensors[t].elem;
        let span: Span = l.kernels[ks[0]].span;
        let name = format!("{}_lin", l.storages[l.tensors[t].storage].name);
        let tmp = l.temp(&shape, elem, name.clone(), span)?;
        for &k in &ks {
            l.kernels[k].out.t = tmp;
        }
        let last = *ks.last().unwrap_or(&0);
        let before = l.kernels.len();
        l.push_copy(
            t,
            Operand { t: tmp, map: identity(shape.len()), gather: false },
            "copy",
            &name,
            LayoutOp::Convert.name(),
            span,
        );
        let copy = l.kernels.remove(before);
        l.kernels.insert(last + 1, copy);
        l.copies += 1;
    }
    Ok(())
}

/// Simplified index expressions by the expression and the extents of the domain dimensions it
/// reads, those renumbered `d0, d1, ...` in order. Simplification sees a dimension only through
/// its range, so an expression over dimensions of the same extents simplifies the same in any
/// kernel: equal expressions recur across the kernels of a function (the maps of one tensor's
/// layout in every launch that reads it, with or without other dimensions around it, and again
/// after [`Mapper::split_dims`] renumbers the dimensions) and across the functions of a module
/// (a loss and its gradient).
pub(crate) type MapMemo = HashMap<MemoKey, Expr>;

/// The key of [`MapMemo`]: an expression over `d0 .. dk` and the extents of those.
type MemoKey = (Expr, Vec<u64>);

/// The memo key of `e` over `domain`, with the domain dimension each key dimension stands for;
/// `None` when `e` has nothing to simplify.
fn memo_key(e: &Expr, domain: &[u64]) -> Option<(MemoKey, Vec<usize>)> {
    // Symbols have no range the simplifier knows: such maps are kept as written.
    if div_like(e) == 0 || e.vars().iter().any(|v| !is_dim_name(v)) {
        return None;
    }
    let mask = dims_read(e);
    let used: Vec<usize> = (0..domain.len().min(64)).filter(|&k| mask & (1 << k) != 0).collect();
    let mut compact = [usize::MAX; 64];
    for (i, &k) in used.iter().enumerate() {
        compact[k] = i;
    }
    let key = (
        renumber(e, &|k| compact.get(k).copied().filter(|&i| i != usize::MAX)),
        used.iter().map(|&k| domain[k]).collect(),
    );
    Some((key, used))
}

/// `e` with each dimension `dK` renamed to `d(to(K))` where `to` gives one; nothing else
/// changes (no folding).
fn renumber(e: &Expr, to: &dyn Fn(usize) -> Option<usize>) -> Expr {
    match e {
        Expr::Var(v) => {
            match v.strip_prefix('d').and_then(|k| k.parse::<usize>().ok()).and_then(to) {
                Some(i) => dim(i),
                None => e.clone(),
            }
        }
        Expr::Const(_) => e.clone(),
        Expr::Neg(a) => Expr::Neg(Box::new(renumber(a, to))),
        Expr::Bin(op, a, b) => Expr::Bin(*op, Box::new(renumber(a, to)), Box::new(renumber(b, to))),
    }
}

/// Whether `v` names a domain dimension (`d0`, `d1`, ...), not a symbol.
fn is_dim_name(v: &str) -> bool {
    v.strip_prefix('d').is_some_and(|k| k.parse::<usize>().is_ok())
}

/// The domain dimensions `d0` .. `d63` that `e` reads, as a bit set.
fn dims_read(e: &Expr) -> u64 {
    match e {
        Expr::Var(v) => v
            .strip_prefix('d')
            .and_then(|k| k.parse::<u32>().ok())
            .filter(|&k| k < 64)
            .map_or(0, |k| 1 << k),
        _ => e.children().fold(0, |m, c| m | dims_read(c)),
    }
}

/// The expression of `key` simplified over the ranges of its dimensions.
fn simplify_keyed((e, extents): &MemoKey) -> Expr {
    let mut ranges = Ranges::new();
    for (k, &n) in extents.iter().enumerate() {
        let _ = ranges.insert(fbc_index::dim_name(k), 0, n as i64);
    }
    let limits = Limits { time_limit: std::time::Duration::from_millis(100), ..Limits::default() };
    fbc_index::simplify(e, &ranges, &limits).output
}

/// The number of threads the machine gives this process (asked once: the answer reads cgroup
/// files, which costs more than a small batch of work).
fn cpus() -> usize {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, usize::from))
}

/// Builds final kernels, simplifying maps (memoised per expression, see [`MapMemo`]).
pub(crate) struct Mapper<'m> {
    simplify: bool,
    /// Shared by the mappers of [`build_all`]'s threads; locked only to look up and insert,
    /// never while simplifying.
    memo: &'m Mutex<MapMemo>,
    /// Threads [`Mapper::prefill`] may use (1 inside [`build_all`]'s workers).
    threads: usize,
    pub divmod_before: usize,
    pub divmod_after: usize,
    /// Domain dimensions split in two (see [`Mapper::split_dims`]).
    pub split: usize,
}

/// The memo, even if a thread panicked while holding it (its entries are whole: each is
/// inserted in one call).
fn lock(memo: &Mutex<MapMemo>) -> std::sync::MutexGuard<'_, MapMemo> {
    memo.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A built kernel and the storages of its operands (inputs, then the output), or why it could
/// not be built.
pub(crate) type Built = Result<(Kernel, Vec<Sid>), Diagnostic>;

/// Builds the kernels of `l`, `names[i]` for `l.kernels[i]`, in that order, on as many threads as
/// the machine gives (each takes the next kernel not yet taken), sharing `memo`. Kernels are
/// independent and the memo caches a pure function, so the result is what building them one
/// at a time gives. Also returns the mappers' counts summed: `(divmod_before, divmod_after,
/// split)`.
pub(crate) fn build_all(
    l: &Lower<'_>,
    names: Vec<String>,
    simplify: bool,
    memo: &Mutex<MapMemo>,
) -> (Vec<Built>, [usize; 3]) {
    let n = l.kernels.len();
    let threads = if simplify { cpus().min(n) } else { 1 };
    let counts = |m: &Mapper<'_>| [m.divmod_before, m.divmod_after, m.split];
    if threads < 2 {
        let mut m = Mapper::new(simplify, memo, cpus());
        let built = l.kernels.iter().zip(names).map(|(k, name)| m.build(l, k, name)).collect();
        return (built, counts(&m));
    }
    let next = AtomicUsize::new(0);
    let names = &names;
    let mut slots: Vec<Option<Built>> = (0..n).map(|_| None).collect();
    let mut total = [0; 3];
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut m = Mapper::new(simplify, memo, 1);
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(k) = l.kernels.get(i) else { break };
                        out.push((i, m.build(l, k, names[i].clone())));
                    }
                    (out, counts(&m))
                })
            })
            .collect();
        for w in workers {
            // A worker that panicked leaves its kernels unbuilt; the panic goes on below.
            let (out, c) = w.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            for (i, b) in out {
                slots[i] = Some(b);
            }
            for (t, c) in total.iter_mut().zip(c) {
                *t += c;
            }
        }
    });
    let built = slots
        .into_iter()
        .map(|b| {
            b.unwrap_or_else(|| Err(located(Span::default(), "internal: a kernel was not built")))
        })
        .collect();
    (built, total)
}

impl<'m> Mapper<'m> {
    /// A mapper that starts from (and adds to) the simplifications in `memo`, prefilling on up
    /// to `threads` threads.
    pub(crate) fn new(simplify: bool, memo: &'m Mutex<MapMemo>, threads: usize) -> Mapper<'m> {
        Mapper { simplify, memo, threads, divmod_before: 0, divmod_after: 0, split: 0 }
    }

    /// `results` simplified over `domain` (memoised; no statistics): each result simplified on
    /// its own, and the map kept as it was unless every result converts back to the IR's
    /// syntax.
    fn simplified(&mut self, results: Vec<Expr>, domain: &[u64]) -> Vec<Expr> {
        if !self.simplify || results.iter().all(|e| div_like(e) == 0) {
            return results;
        }
        let simple: Vec<Expr> = results
            .iter()
            .map(|e| match memo_key(e, domain) {
                Some((key, used)) => {
                    let known = lock(self.memo).get(&key).cloned();
                    let r = known.unwrap_or_else(|| {
                        let r = simplify_keyed(&key);
                        lock(self.memo).entry(key).or_insert(r).clone()
                    });
                    renumber(&r, &|i| used.get(i).copied())
                }
                None => e.clone(),
            })
            .collect();
        if simple.iter().all(|e| e.to_affine().is_some()) {
            simple
        } else {
            results
        }
    }

    /// Simplifies, in parallel, each of `exprs` (over its domain) that the memo does not hold
    /// yet, and adds them to it: what [`Mapper::simplified`] then finds there. The e-graph runs
    /// are independent, so the worker threads share nothing but the list; results are the same
    /// as one at a time.
    fn prefill<'e>(&mut self, exprs: impl IntoIterator<Item = (&'e Expr, &'e [u64])>) {
        if !self.simplify {
            return;
        }
        let mut keys: Vec<MemoKey> =
            exprs.into_iter().filter_map(|(e, domain)| Some(memo_key(e, domain)?.0)).collect();
        {
            let memo = lock(self.memo);
            keys.retain(|k| !memo.contains_key(k));
        }
        let unique: rustc_hash::FxHashSet<MemoKey> = keys.drain(..).collect();
        keys.extend(unique);
        let threads = self.threads.min(keys.len());
        if threads < 2 {
            return;
        }
        let next = std::sync::atomic::AtomicUsize::new(0);
        let done: Vec<(usize, Expr)> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        let mut out = Vec::new();
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some(key) = keys.get(i) else { break };
                            out.push((i, simplify_keyed(key)));
                        }
                        out
                    })
                })
                .collect();
            workers.into_iter().flat_map(|w| w.join().unwrap_or_default()).collect()
        });
        let mut memo = lock(self.memo);
        for (i, r) in done {
            memo.insert(keys[i].clone(), r);
        }
    }

    /// Splits domain dimensions that the maps only use through `d floordiv c` and `d mod c`.
    ///
    /// A dimension `d` of extent `n` that a map reads as `d floordiv c` or `d mod c` (with `c`
    /// dividing `n`) becomes two, `(e, f)` of extents `(n / c, c)` with `d = c·e + f`; the maps are
    /// re-simplified, and the split is kept when it removes div/mod operations. Points are visited
    /// in the same order (`e` outer), so reductions still combine in domain order. This turns the
    /// texel arithmetic of R-Tile layouts into plain dimensions: heads folded into a row index
    /// become a batch dimension, and a reduction over texel channels becomes its own dimension,
    /// which the back ends' contraction kernels and vector reads recognise.
    fn split_dims(&mut self, k: &mut LKernel, exprs: &mut [Vec<Expr>], image_out: bool) -> usize {
        const MAX_DIMS: usize = 8;
        const MAX_SPLITS: usize = 6;
        let total = |ex: &[Vec<Expr>]| -> usize { ex.iter().flatten().map(div_like).sum() };
        let mut splits = 0;
        while splits < MAX_SPLITS && k.domain.len() < MAX_DIMS {
            let now = total(exprs);
            if now == 0 {
                break;
            }
            let mut cands = Vec::new();
            for e in exprs.iter().flatten() {
                split_candidates(e, &k.domain, &mut cands);
            }
            // The channel of an image output stays one dimension (back ends write whole texels):
            // the last parallel dimension, or a row kernel's last dimension.
            let channel = if k.is_row() { k.domain.len() } else { k.n_par };
            cands.retain(|&(d, _)| !(image_out && d + 1 == channel));
            cands.sort_unstable();
            cands.dedup();
            // (div-like operations left, (dimension, factor), the split maps)
            type Trial = (usize, (usize, u64), Vec<Vec<Expr>>);
            let mut best: Option<Trial> = None;
            // Each candidate's maps, split directly or substituted and still to be simplified
            // (all of those first, in parallel; the trials below then find them in the memo):
            // ((dimension, factor), the split domain, per map (to simplify, its results)). A map
            // that does not read the dimension always splits directly (only renumbered).
            type Staged = ((usize, u64), Vec<u64>, Vec<(bool, Vec<Expr>)>);
            let staged: Vec<Staged> = cands
                .iter()
                .map(|&(d, c)| {
                    let mut domain = k.domain.clone();
                    domain.splice(d..=d, [domain[d] / c, c]);
                    let sub = split_subst(k.domain.len(), d, c);
                    let maps = exprs
                        .iter()
                        .map(|r| {
                            if let Some(direct) =
                                r.iter().map(|e| split_direct(e, d, c)).collect::<Option<Vec<_>>>()
                            {
                                return (false, direct);
                            }
                            (true, r.iter().map(|e| e.substitute_all(&sub)).collect())
                        })
                        .collect();
                    ((d, c), domain, maps)
                })
                .collect();
            self.prefill(staged.iter().flat_map(|(_, domain, maps)| {
                maps.iter()
                    .filter(|(simplify, _)| *simplify)
                    .flat_map(move |(_, r)| r.iter().map(move |e| (e, domain.as_slice())))
            }));
            for ((d, c), domain, maps) in staged {
                let trial: Vec<Vec<Expr>> = maps
                    .into_iter()
                    .map(|(simplify, r)| if simplify { self.simplified(r, &domain) } else { r })
                    .collect();
                let n = total(&trial);
                if n < now && best.as_ref().is_none_or(|b| n < b.0) {
                    best = Some((n, (d, c), trial));
                }
            }
            let Some((_, (d, c), trial)) = best else { break };
            exprs.clone_from_slice(&trial);
            // The same substitution on the payload's domain indices.
            let sub = split_subst(k.domain.len(), d, c);
            let dims: Vec<Scalar> = (0..k.domain.len())
                .map(|j| sub.get(&format!("d{j}")).map_or(Scalar::Dim(j), expr_scalar))
                .collect();
            subst_payloads(k, &dims);
            let n = k.domain[d];
            k.domain.splice(d..=d, [n / c, c]);
            if d < k.n_par {
                k.n_par += 1;
            }
            splits += 1;
        }
        splits
    }

    /// The IR map of `results` over `n` dimensions and `symbols` symbols (`s0`, ...).
    fn affine(
        &self,
        results: &[Expr],
        n: usize,
        symbols: usize,
        span: Span,
    ) -> Result<IndexMap, Diagnostic> {
        let results = results
            .iter()
            .map(|e| {
                e.to_affine()
                    .ok_or_else(|| located(span, format!("index `{e}` has no affine form")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(IndexMap {
            dims: (0..n).map(fbc_index::dim_name).collect(),
            symbols: (0..symbols).map(|j| format!("s{j}")).collect(),
            results,
        })
    }

    /// Storage coordinates of tensor operand `o` (logical map already over the final domain).
    fn storage_map(l: &Lower<'_>, o: &Operand) -> Vec<Expr> {
        let t = &l.tensors[o.t];
        let s = &l.storages[t.storage];
        if o.gather {
            return vec![Expr::Const(0)];
        }
        match &s.layout {
            Layout::Linear => vec![linear_offset(&t.shape, &o.map)],
            Layout::RTile(r) => {
                let [x, y, ch] = rtile_texel(r, &t.shape, &o.map);
                if s.ty.is_image() {
                    vec![x, y, ch]
                } else {
                    let w = r.image_extent(&t.shape).map_or(1, |[w, _]| w);
                    vec![add(mul(add(mul(y, w), x), CHANNELS), ch)]
                }
            }
        }
    }

    /// The final kernel of `k` and the storages of its operands (inputs, then output).
    pub(crate) fn build(
        &mut self,
        l: &Lower<'_>,
        k: &LKernel,
        name: String,
    ) -> Result<(Kernel, Vec<Sid>), Diagnostic> {
        let out_t = &l.tensors[k.out.t];
        let out_s = &l.storages[out_t.storage];
        let mut k = k.clone();
        let mut guard = None;
        let row = k.is_row();
        let image_out = out_s.ty.is_image();
        if row && image_out {
            // A row kernel writes whole texels: its last (row) dimension becomes (texel, channel),
            // `d = 4·e + f`; the output's layout makes `f` the channel (`Lower::row_output`).
            let last = k.domain.len() - 1;
            let n = k.domain[last];
            if n % CHANNELS != 0 {
                return Err(located(k.span, format!("internal: a row kernel writes an image, but its rows of {n} are not whole texels")));
            }
            let mut with: Map = identity(last);
            with.push(add(mul(dim(last), CHANNELS), dim(last + 1)));
            for o in k.inputs.iter_mut().chain(std::iter::once(&mut k.out)) {
                if !o.gather {
                    o.map = compose(&o.map, &with);
                }
            }
            let dims: Vec<Scalar> = with.iter().map(expr_scalar).collect();
            subst_payloads(&mut k, &dims);
            k.domain.splice(last.., [n / CHANNELS, CHANNELS]);
        } else if let (true, Layout::RTile(r), None) = (image_out, &out_s.layout, &k.attention) {
            // Iterate over texels: (y, x, c) then the reductions. (An attention launch keeps its
            // domain and writes whole texels of four values of the head: `writes_result_in`.)
            let (inv, gmap, bounds) = rtile_inverse(r, &out_t.shape);
            let [w, h] = r.image_extent(&out_t.shape).unwrap_or([1, 1]);
            let red = k.domain.len() - k.n_par;
            // Old parallel dim p → inv[p]; old reduction dim n_par + q → new dim 3 + q.
            let mut with: Map = inv.clone();
            with.truncate(k.n_par);
            for q in 0..red {
                with.push(dim(3 + q));
            }
            for o in &mut k.inputs {
                if !o.gather {
                    o.map = compose(&o.map, &with);
                }
            }
            let dims: Vec<Scalar> = with.iter().map(expr_scalar).collect();
            subst_payloads(&mut k, &dims);
            let mut domain = vec![h, w, CHANNELS];
            domain.extend_from_slice(&k.domain[k.n_par..]);
            k.domain = domain;
            k.n_par = 3;
            k.out.map = inv;
            guard = Some((gmap, bounds));
        }
        // The output of a kernel iterating over texels is written at `(x, y, c) = (d1, d0, d2)`.
        let texel_domain = image_out && !row && k.attention.is_none();
        let mut sids = Vec::new();
        let mut exprs = Vec::new();
        for o in k.inputs.iter().chain(std::iter::once(&k.out)) {
            let results = if std::ptr::eq(o, &k.out) && texel_domain {
                vec![dim(1), dim(0), dim(2)]
            } else {
                Self::storage_map(l, o)
            };
            exprs.push(results);
            sids.push(l.tensors[o.t].storage);
        }
        let bounds = guard.as_ref().map(|(g, b): &(Map, Vec<u64>)| {
            exprs.push(g.clone());
            b.clone()
        });
        // div/mod before simplification, and left in the final (simplified, split) maps.
        self.divmod_before += exprs.iter().flatten().map(Expr::count_divmod).sum::<usize>();
        self.prefill(exprs.iter().flatten().map(|e| (e, k.domain.as_slice())));
        for r in &mut exprs {
            *r = self.simplified(std::mem::take(r), &k.domain);
        }
        // An attention launch keeps its dimensions: query points, head dimension, keys.
        if self.simplify && k.attention.is_none() {
            self.split += self.split_dims(&mut k, &mut exprs, image_out);
        }
        self.divmod_after += exprs.iter().flatten().map(Expr::count_divmod).sum::<usize>();
        if self.simplify {
            self.simplify_payload_indices(&mut k);
        }
        let n = k.domain.len();
        if row && image_out {
            // The texel's x and y must not depend on the channel (the last dimension).
            let out_map = &exprs[k.inputs.len()];
            let ch = Expr::dim(n - 1);
            let uses_ch = |e: &Expr| n <= 64 && dims_read(e) & (1 << (n - 1)) != 0;
            if out_map[2] != ch || out_map[..2].iter().any(uses_ch) {
                return Err(located(
                    k.span,
                    format!("internal: a row kernel's image output is not written a texel at a time: ({})", out_map.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")),
                ));
            }
        }
        let guard = match bounds {
            Some(bounds) => {
                let g = exprs.pop().unwrap_or_default();
                // Conditions that hold on the whole domain (no padding there) are dropped.
                let (g, bounds): (Vec<Expr>, Vec<u64>) = g
                    .into_iter()
                    .zip(bounds)
                    .filter(|(e, b)| {
                        !interval(e, &k.domain).is_some_and(|(lo, hi)| lo >= 0 && (hi as u64) < *b)
                    })
                    .unzip();
                if g.is_empty() {
                    None
                } else {
                    Some(Guard { map: self.affine(&g, n, 0, k.span)?, bounds })
                }
            }
            None => None,
        };
        let syms = k.symbols.len();
        let maps =
            exprs.iter().map(|r| self.affine(r, n, syms, k.span)).collect::<Result<Vec<_>, _>>()?;
        let rest = match (row, &k.attention) {
            (true, _) => Iter::Row,
            (false, Some(_)) => Iter::Key,
            (false, None) => Iter::Reduction,
        };
        let iterators = (0..n).map(|i| if i < k.n_par { Iter::Parallel } else { rest }).collect();
        let attention = match &k.attention {
            Some(a) => {
                let last = match &a.last {
                    Some(l) => Some(self.affine(&l.results, n, syms, k.span)?),
                    None => None,
                };
                Some(Attention { last, ..a.clone() })
            }
            None => None,
        };
        let kernel = Kernel {
            name,
            source: source_of(&k),
            domain: k.domain.clone(),
            iterators,
            maps,
            body: k.body.clone(),
            combine: k.combine,
            epilogue: k.epilogue.clone(),
            guard,
            stats: k.stats.clone(),
            symbols: k.symbols.clone(),
            attention,
            // The split-K hint of the skinny kernel's one-launch split (`split_k.rs`).
            split: k.split,
        };
        Ok((kernel, sids))
    }
}

/// The launch's `source`: the ops `+`-joined, the kernel's note after the first one.
fn source_of(k: &LKernel) -> String {
    let mut s = String::new();
    for (i, op) in k.source.iter().enumerate() {
        if i > 0 {
            s.push('+');
        }
        s.push_str(op);
        if i == 0 {
            s.push_str(&k.note);
        }
    }
    s
}

/// Adds `(d, c)` for every `dK floordiv c` and `dK mod c` in `e` where `c` properly divides the
/// extent of `dK`.
fn split_candidates(e: &Expr, domain: &[u64], out: &mut Vec<(usize, u64)>) {
    // The simplifier writes power-of-two division and modulo as `>>` and `&`.
    let by = match e {
        Expr::Bin(IndexOp::FloorDiv, a, b) | Expr::Bin(IndexOp::Mod, a, b) => match **b {
            Expr::Const(c) => Some((a, c)),
            _ => None,
        },
        Expr::Bin(IndexOp::Shr, a, b) => match **b {
            Expr::Const(k) if (0..62).contains(&k) => Some((a, 1i64 << k)),
            _ => None,
        },
        Expr::Bin(IndexOp::And, a, b) => match **b {
            Expr::Const(m) if m > 0 && (m & (m + 1)) == 0 => Some((a, m + 1)),
            _ => None,
        },
        _ => None,
    };
    if let Some((a, c)) = by {
        if let Expr::Var(v) = &**a {
            let d = v.strip_prefix('d').and_then(|k| k.parse::<usize>().ok());
            if let (Some(d), Ok(c)) = (d, u64::try_from(c)) {
                if let Some(&n) = domain.get(d) {
                    if c > 1 && c < n && n % c == 0 {
                        out.push((d, c));
                    }
                }
            }
        }
    }
    for ch in e.children() {
        split_candidates(ch, domain, out);
    }
}

/// Division-like operations in `e`: `floordiv`, `ceildiv`, `mod`, and the shifts and masks the
/// simplifier writes for powers of two.
fn div_like(e: &Expr) -> usize {
    let own = usize::from(matches!(
        e,
        Expr::Bin(IndexOp::FloorDiv, ..)
            | Expr::Bin(IndexOp::CeilDiv, ..)
            | Expr::Bin(IndexOp::Mod, ..)
            | Expr::Bin(IndexOp::Shr, ..)
            | Expr::Bin(IndexOp::And, ..)
    ));
    own + e.children().map(div_like).sum::<usize>()
}

/// The substitution that splits dimension `d` of an `n`-dimensional domain by `c`: `dd → c·dd +
/// d(d+1)`, later dimensions move up by one.
fn split_subst(n: usize, d: usize, c: u64) -> HashMap<String, Expr> {
    (d..n)
        .map(|j| {
            let to = if j == d { add(mul(dim(d), c), dim(d + 1)) } else { dim(j + 1) };
            (fbc_index::dim_name(j), to)
        })
        .collect()
}

/// `e` after splitting dimension `d` by `c` (see [`Mapper::split_dims`]) when `e` reads `d` only
/// as `d floordiv c` (or `d >> log2 c`), which becomes the outer new dimension, and `d mod c`
/// (or `d & (c - 1)`), the inner one; later dimensions move up by one. `None` where `e` reads
/// `d` otherwise: then the substituted `c·e + f` needs the simplifier. Nothing else in `e`
/// changes: `e` was simplified already, and the result equals the substitution everywhere on
/// the domain, found without the e-graph (which spent most of `lower-to-memory`'s time
/// re-deriving it).
fn split_direct(e: &Expr, d: usize, c: u64) -> Option<Expr> {
    let index = |v: &str| v.strip_prefix('d').and_then(|k| k.parse::<usize>().ok());
    let is_d = |a: &Expr| matches!(a, Expr::Var(v) if index(v) == Some(d));
    let is = |b: &Expr, want: u64| matches!(b, Expr::Const(k) if u64::try_from(*k) == Ok(want));
    let shift = |b: &Expr| matches!(b, Expr::Const(k) if (0..62).contains(k) && 1u64 << k == c);
    Some(match e {
        Expr::Bin(IndexOp::FloorDiv, a, b) if is_d(a) && is(b, c) => dim(d),
        Expr::Bin(IndexOp::Shr, a, b) if is_d(a) && shift(b) => dim(d),
        Expr::Bin(IndexOp::Mod, a, b) if is_d(a) && is(b, c) => dim(d + 1),
        // `d & m` is `d mod (m + 1)` only for a power of two.
        Expr::Bin(IndexOp::And, a, b) if is_d(a) && c.is_power_of_two() && is(b, c - 1) => {
            dim(d + 1)
        }
        Expr::Var(v) => match index(v) {
            Some(j) if j == d => return None,
            Some(j) if j > d => dim(j + 1),
            _ => e.clone(),
        },
        Expr::Const(_) => e.clone(),
        Expr::Neg(a) => Expr::Neg(Box::new(split_direct(a, d, c)?)),
        Expr::Bin(op, a, b) => {
            Expr::Bin(*op, Box::new(split_direct(a, d, c)?), Box::new(split_direct(b, d, c)?))
        }
    })
}

/// `e` with every domain index `Dim(i)` replaced by `dims[i]`.
pub(crate) fn subst_dims(e: &Scalar, dims: &[Scalar]) -> Scalar {
    map_scalar(e, &mut |s| match s {
        Scalar::Dim(i) => dims.get(*i).cloned(),
        _ => None,
    })
}

/// [`subst_dims`] in every payload of `k`: body, epilogue, statistics.
fn subst_payloads(k: &mut LKernel, dims: &[Scalar]) {
    k.body = subst_dims(&k.body, dims);
    k.epilogue = k.epilogue.as_ref().map(|e| subst_dims(e, dims));
    for st in &mut k.stats {
        st.body = subst_dims(&st.body, dims);
        st.epilogue = st.epilogue.as_ref().map(|e| subst_dims(e, dims));
    }
}

impl Mapper<'_> {
    /// Simplifies, like the operands' maps, every integer subexpression of domain indices
    /// that a payload computes with a division or a modulo (a rotation's half test after the
    /// domain was tiled: `((d0·16 + d1)·2 + d2)·4 + d3) mod 128 floordiv 4 mod 2 · 32 + ...`
    /// becomes `d2 · 32 + ...`), over the kernel's final domain. Only where every value of the
    /// subexpression fits in 32 bits over the domain: there the payload's wrapping 64-bit
    /// arithmetic and the simplifier's exact integers agree.
    fn simplify_payload_indices(&mut self, k: &mut LKernel) {
        let domain = k.domain.clone();
        let Some(points) = fbc_dialects::memory::bounds::domain_box(&domain) else { return };
        let mut simplify = |e: &Scalar| {
            map_scalar(e, &mut |s| {
                let ix = Ix::of_scalar(s)?;
                let x = ix.to_expr();
                if div_like(&x) == 0 || !ix.fits_i32(&points) {
                    return None;
                }
                let r = self.simplified(vec![x], &domain).pop()?.to_affine()?;
                scalar_of(&r, &|_| None)
            })
        };
        k.body = simplify(&k.body);
        k.epilogue = k.epilogue.as_ref().map(&mut simplify);
        for st in &mut k.stats {
            st.body = simplify(&st.body);
            st.epilogue = st.epilogue.as_ref().map(&mut simplify);
        }
    }
}

/// An index expression as integer scalar arithmetic (`/` and `%` floor on integers).
pub(crate) fn expr_scalar(e: &Expr) -> Scalar {
    // Other operators are not produced by the maps built here.
    let other = |o: &Expr| Some(Scalar::Int(o.eval(&|_| None).unwrap_or(0)));
    scalar_of(e, &other).unwrap_or(Scalar::Int(0))
}

/// [`expr_scalar`] with `other` writing each subexpression whose operator integer scalar
/// arithmetic lacks (`None` from it: `e` is not written).
fn scalar_of(e: &Expr, other: &dyn Fn(&Expr) -> Option<Scalar>) -> Option<Scalar> {
    let b = |op, a: &Expr, c: &Expr| {
        Some(Scalar::Bin(op, Box::new(scalar_of(a, other)?), Box::new(scalar_of(c, other)?)))
    };
    match e {
        Expr::Const(v) => Some(Scalar::Int(*v)),
        Expr::Var(v) => Some(Scalar::Dim(v.trim_start_matches('d').parse().unwrap_or(0))),
        Expr::Bin(IndexOp::Add, a, c) => b(ScalarBin::Add, a, c),
        Expr::Bin(IndexOp::Sub, a, c) => b(ScalarBin::Sub, a, c),
        Expr::Bin(IndexOp::Mul, a, c) => b(ScalarBin::Mul, a, c),
        Expr::Bin(IndexOp::FloorDiv, a, c) => b(ScalarBin::Div, a, c),
        Expr::Bin(IndexOp::Mod, a, c) => b(ScalarBin::Rem, a, c),
        Expr::Neg(a) => Some(Scalar::Bin(
            ScalarBin::Sub,
            Box::new(Scalar::Int(0)),
            Box::new(scalar_of(a, other)?),
        )),
        o => other(o),
    }
}

/// The range `[lo, hi]` of `e` when every `dK` lies in `0..domain[K]`; `None` when unknown.
fn interval(e: &Expr, domain: &[u64]) -> Option<(i64, i64)> {
    let konst = |e: &Expr| match e {
        Expr::Const(c) => Some(*c),
        _ => None,
    };
    Some(match e {
        Expr::Const(c) => (*c, *c),
        Expr::Var(v) => {
            let k: usize = v.strip_prefix('d')?.parse().ok()?;
            (0, i64::try_from(*domain.get(k)?).ok()?.checked_sub(1)?)
        }
        Expr::Bin(IndexOp::Add, a, b) => {
            let (a, b) = (interval(a, domain)?, interval(b, domain)?);
            (a.0.checked_add(b.0)?, a.1.checked_add(b.1)?)
        }
        Expr::Bin(IndexOp::Sub, a, b) => {
            let (a, b) = (interval(a, domain)?, interval(b, domain)?);
            (a.0.checked_sub(b.1)?, a.1.checked_sub(b.0)?)
        }
        Expr::Bin(IndexOp::Mul, a, b) => {
            let (a, c) = match (konst(a), konst(b)) {
                (_, Some(c)) => (interval(a, domain)?, c),
                (Some(c), _) => (interval(b, domain)?, c),
                _ => return None,
            };
            let (x, y) = (a.0.checked_mul(c)?, a.1.checked_mul(c)?);
            (x.min(y), x.max(y))
        }
        Expr::Bin(IndexOp::FloorDiv, a, b) | Expr::Bin(IndexOp::Shr, a, b) => {
            let c = konst(b)?;
            let c = if matches!(e, Expr::Bin(IndexOp::Shr, ..)) {
                1i64.checked_shl(u32::try_from(c).ok()?)?
            } else {
                c
            };
            if c <= 0 {
                return None;
            }
            let a = interval(a, domain)?;
            (a.0.div_euclid(c), a.1.div_euclid(c))
        }
        Expr::Bin(IndexOp::Shl, a, b) => {
            let c = 1i64.checked_shl(u32::try_from(konst(b)?).ok()?)?;
            let a = interval(a, domain)?;
            (a.0.checked_mul(c)?, a.1.checked_mul(c)?)
        }
        Expr::Bin(IndexOp::And, a, b) => {
            // `x & (2^k - 1)` is `x mod 2^k`.
            let c = konst(b)?.checked_add(1)?;
            if c <= 0 || c & (c - 1) != 0 {
                return None;
            }
            let a = interval(a, domain)?;
            if a.0 >= 0 && a.1 < c {
                a
            } else {
                (0, c - 1)
            }
        }
        Expr::Bin(IndexOp::Mod, a, b) => {
            let c = konst(b)?;
            if c <= 0 {
                return None;
            }
            let a = interval(a, domain)?;
            if a.0 >= 0 && a.1 < c {
                a
            } else {
                (0, c - 1)
            }
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use fbc_dialects::layout::Storage;

    use super::*;

    fn eval(e: &Expr, vals: &[i64]) -> i64 {
        e.eval(&|v: &str| {
            v.strip_prefix('d').and_then(|k| k.parse::<usize>().ok()).map(|k| vals[k])
        })
        .expect("defined")
    }

    /// Every index of `shape` in every layout below: the texel map agrees with
    /// `RTile::texel_of`, and the inverse map on every texel of the image gives back the index
    /// whose texel it is (guard true) or lies in the padding (guard false).
    #[test]
    fn texel_maps_agree_with_the_layout_and_invert() {
        let layouts = [
            ([4, 4], Intra::Rows, 1),
            ([4, 4], Intra::Rows, 0),
            ([2, 8], Intra::Block { bh: 2, bw: 4 }, 0),
            ([4, 8], Intra::Block { bh: 2, bw: 4 }, 1),
            ([3, 5], Intra::Rows, 1),
            ([2, 2], Intra::Rows, 0),
        ];
        let shapes = [vec![6u64, 10], vec![2, 5, 7], vec![3, 2, 4, 8], vec![2, 6, 3, 5]];
        let mut cases = Vec::new();
        for s in &shapes {
            let packs: &[Pack] = if s.len() >= 3 { &[Pack::W, Pack::C] } else { &[Pack::W] };
            for &p in packs {
                cases.extend(layouts.iter().map(|&l| (s.clone(), p, l)));
            }
        }
        for (shape, pack, (tile, intra, h)) in cases {
            let n = shape.len();
            {
                let horizontal = if h == 1 { n as u64 - 1 } else { n as u64 - 2 };
                let st = Storage::Image2d;
                let r = RTile::packed_for_shape(&shape, tile, intra, horizontal, pack, st).unwrap();
                let idx: Map = (0..n).map(dim).collect();
                let map = rtile_texel(&r, &shape, &idx);
                let mut seen = std::collections::HashSet::new();
                let total: u64 = shape.iter().product();
                for flat in 0..total {
                    let mut i = vec![0u64; n];
                    let mut f = flat;
                    for k in (0..n).rev() {
                        i[k] = f % shape[k];
                        f /= shape[k];
                    }
                    let vals: Vec<i64> = i.iter().map(|&v| v as i64).collect();
                    let want = r.texel_of(&shape, &i).unwrap();
                    let got: Vec<i64> = map.iter().map(|e| eval(e, &vals)).collect();
                    assert_eq!(
                        got,
                        vec![want.x as i64, want.y as i64, want.c as i64],
                        "{r} {shape:?} {i:?}"
                    );
                    seen.insert(got);
                }
                let [w, hh] = r.image_extent(&shape).unwrap();
                let (inv, guard, bounds) = rtile_inverse(&r, &shape);
                let mut valid = 0;
                for y in 0..hh as i64 {
                    for x in 0..w as i64 {
                        for c in 0..4 {
                            let t = [y, x, c];
                            let ok = guard.iter().zip(&bounds).all(|(g, &b)| {
                                let v = eval(g, &t);
                                v >= 0 && (v as u64) < b
                            });
                            assert_eq!(
                                ok,
                                seen.contains(&vec![x, y, c]),
                                "{r} {shape:?} texel {t:?}"
                            );
                            if ok {
                                valid += 1;
                                let i: Vec<i64> = inv.iter().map(|e| eval(e, &t)).collect();
                                let back: Vec<i64> = map.iter().map(|e| eval(e, &i)).collect();
                                assert_eq!(back, vec![x, y, c], "{r} {shape:?} {i:?}");
                            }
                        }
                    }
                }
                assert_eq!(valid, total, "{r} {shape:?}");
            }
        }
    }

    #[test]
    fn linear_offsets_skip_unit_axes() {
        let idx: Map = (0..3).map(dim).collect();
        assert_eq!(linear_offset(&[1, 4, 5], &idx).to_string(), "d1 * 5 + d2");
        assert_eq!(linear_offset(&[], &[]), Expr::Const(0));
    }

    #[test]
    fn intervals_bound_guard_expressions() {
        let e = Expr::parse("d0 * 4 + d1 mod 4").unwrap();
        assert_eq!(interval(&e, &[8, 100]), Some((0, 31)));
        let e = Expr::parse("(d0 floordiv 4) - 1").unwrap();
        assert_eq!(interval(&e, &[8]), Some((-1, 0)));
        assert_eq!(interval(&Expr::parse("d0 * d1").unwrap(), &[2, 2]), None);
    }

    /// Splitting `d1` (extent 8) by 4 without the simplifier: `d1 floordiv 4` and `d1 >> 2`
    /// become the outer part, `d1 mod 4` and `d1 & 3` the inner one, later dimensions move up;
    /// on every point the result equals the substitution `d1 = 4·e + f`. A bare `d1`, or a
    /// division by another constant, is left to the simplifier.
    #[test]
    fn a_split_is_made_directly_where_the_dimension_is_read_only_by_its_factor() {
        let parse = |s: &str| Expr::parse(s).expect("parses");
        let cases = [
            ("d1 floordiv 4 * 64 + d1 mod 4 * 2 + d2", Some("d1 * 64 + d2 * 2 + d3")),
            ("(d1 >> 2) * 3 + (d1 & 3) + d0 * 5", Some("d1 * 3 + d2 + d0 * 5")),
            ("d0 + d2 * 7", Some("d0 + d3 * 7")),
            ("d1 + d1 floordiv 4", None),
            ("d1 floordiv 2", None),
        ];
        // By 6: `d1 & 5` is not `d1 mod 6`.
        assert_eq!(split_direct(&parse("d1 & 5"), 1, 6), None);
        assert_eq!(split_direct(&parse("d1 mod 6 + d1 floordiv 6"), 1, 6), Some(parse("d2 + d1")));
        for (src, want) in cases {
            let e = parse(src);
            let got = split_direct(&e, 1, 4);
            assert_eq!(got, want.map(parse), "{src}");
            let Some(got) = got else { continue };
            for d0 in 0..3 {
                for d1 in 0..8 {
                    for d2 in 0..3 {
                        assert_eq!(eval(&e, &[d0, d1, d2]), eval(&got, &[d0, d1 / 4, d1 % 4, d2]));
                    }
                }
            }
        }
    }

    /// The memo sees an expression up to the numbering of its dimensions: the same map over
    /// `d2, d5` and over `d0, d1` of the same extents is one entry, and the result comes back in
    /// the caller's dimensions.
    #[test]
    fn memo_keys_renumber_dimensions_and_results_come_back_in_the_callers() {
        let parse = |s: &str| Expr::parse(s).expect("parses");
        let memo = Mutex::new(MapMemo::default());
        let mut m = Mapper::new(true, &memo, 1);
        let a = m.simplified(vec![parse("(d2 * 4 + d5) floordiv 4")], &[9, 9, 6, 9, 9, 4]);
        assert_eq!(a, vec![parse("d2")]);
        let b = m.simplified(vec![parse("(d0 * 4 + d1) floordiv 4")], &[6, 4]);
        assert_eq!(b, vec![parse("d0")]);
        assert_eq!(lock(&memo).len(), 1);
    }
}
