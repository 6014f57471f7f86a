//! Fusion of logical kernels.
//!
//! Three rewrites, applied in launch order until nothing changes:
//! - **inline**: a kernel `P` that computes tensor `T` pointwise (no reduction, identity output
//!   map, a body without loads) and whose only reader is kernel `K` is substituted into `K`: each
//!   read of `T` at map `m` becomes `P`'s body with `P`'s operand maps composed with `m`, and the
//!   domain indices `P`'s body reads (RoPE's half, a mask's position) become `m`'s results (so `m`
//!   must name no symbol). `P` disappears and `T` is never stored. `P` is inlined only where
//!   `K` computes each element of `T` once, except a decode of packed weights
//!   (`tensor.dequantize`), which `K` recomputes at each read: a contraction reads the packed
//!   bytes and scales, and the f32 weight is never stored.
//!   `K` may be a row kernel (softmax, a normalisation): then `T` is read, and `P` computed, once
//!   per statistic and once for the output, instead of `T` being stored and read as often.
//! - **epilogue**: when `P` is a reduction (matmul, reductions, row statistics) whose result `T`
//!   only a pointwise kernel `K` over `T`'s shape reads, at the identity map, `K` becomes `P`'s
//!   epilogue (`acc` in place of `T`); `K`'s other operands are read at `P`'s output point.
//!   `K` may store elsewhere than `T`'s index (a concatenation's copy, shifted along its axis):
//!   `P` then stores through `K`'s output map composed with its own.
//!   A row kernel `P` (a normalisation, softmax) takes `K` into its body the same way (`P`'s
//!   body in place of `T`: group norm then SiLU is one launch), where `K`'s result is stored as
//!   `T` would have been (same layout and storage type).
//!
//! - **unrolled sum**: a reduction `P` adding at most [`MAX_UNROLLED_TERMS`] terms per element
//!   (LoRA's rank-8 `(x·A)·B`) is inlined like a pointwise producer, as its terms written out,
//!   where `K` computes each element of `T` once (pointwise, or reading `T` only in its
//!   epilogue): the base product's epilogue then adds the LoRA branch.
//!
//! A tensor is never fused away when it is returned, read by a gather, written by several
//! kernels (concat, slice_grad) or shares its storage with another tensor (a linear reshape).
//! The fused kernel takes the position of the later kernel, so every operand it reads is computed
//! before it. A fusion is not made when the fused payload would be deeper than
//! `MAX_TREE_DEPTH` (64; the printed payload must parse back) or larger than `MAX_FUSED_NODES`
//! nodes: a chain of any length compiles, as kernels of at most that depth.

use fbc_dialects::kind::LayoutOp;
use fbc_dialects::memory::scalar::MAX_TREE_DEPTH;
use fbc_dialects::memory::{Combine, Scalar, ScalarBin, Stat};
use smallvec::SmallVec;

use super::{compose, LKernel, Lower, Operand, Tid};

/// Rebuilds `e` bottom-up, replacing every node for which `f` returns `Some`.
pub(crate) fn map_scalar(e: &Scalar, f: &mut dyn FnMut(&Scalar) -> Option<Scalar>) -> Scalar {
    if let Some(r) = f(e) {
        return r;
    }
    match e {
        Scalar::Load(k, off) => Scalar::Load(*k, Box::new(map_scalar(off, f))),
        Scalar::Un(op, a) => Scalar::Un(*op, Box::new(map_scalar(a, f))),
        Scalar::Bin(op, a, b) => {
            Scalar::Bin(*op, Box::new(map_scalar(a, f)), Box::new(map_scalar(b, f)))
        }
        Scalar::Select(c, a, b) => Scalar::Select(
            Box::new(map_scalar(c, f)),
            Box::new(map_scalar(a, f)),
            Box::new(map_scalar(b, f)),
        ),
        other => other.clone(),
    }
}

/// Renumbers operand reads: `In(k)` → `In(to[k])`, `Load(k, ..)` likewise.
fn renumber(e: &Scalar, to: &[usize]) -> Scalar {
    map_scalar(e, &mut |s| match s {
        Scalar::In(k) => Some(Scalar::In(to[*k])),
        Scalar::Load(k, off) => Some(Scalar::Load(to[*k], Box::new(renumber(off, to)))),
        _ => None,
    })
}

/// The largest payload (body or epilogue, in nodes) fusion builds: a producer read several times
/// is copied at each read, so sizes could otherwise grow exponentially with the chain.
pub(crate) const MAX_FUSED_NODES: usize = 4096;

/// Reads of operand slots `slots` in `e` (`In(i)` for `i` in it).
fn reads_of(e: &Scalar, slots: &[bool]) -> usize {
    let mut n = 0;
    e.visit(&mut |s| {
        if let Scalar::In(i) = s {
            n += usize::from(slots.get(*i).copied().unwrap_or(false));
        }
    });
    n
}

/// What fusion needs to know of a payload: its depth, its node count and whether it reads domain
/// indices or explicit offsets (`Dim`, `Load`: then it cannot move to another domain). Kept per
/// kernel and derived for a fused payload from its parts, so a long chain is not walked again at
/// every merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shape {
    depth: usize,
    size: usize,
    /// Reads domain indices (`Dim`).
    dims: bool,
    /// Reads explicit offsets (`Load`).
    loads: bool,
}

/// A shape of one node reading nothing.
const LEAF: Shape = Shape { depth: 1, size: 1, dims: false, loads: false };

impl Shape {
    /// The shape of `e` itself.
    fn of(e: &Scalar) -> Shape {
        Shape::substituted(e, &[], LEAF)
    }

    /// The shape of `e` once every read `In(i)` with `slots[i]` is replaced by a payload of
    /// shape `inserted`, from one walk of `e`.
    fn substituted(e: &Scalar, slots: &[bool], inserted: Shape) -> Shape {
        let mut out = Shape { depth: 0, size: 0, dims: false, loads: false };
        // A depth-first walk keeps at most depth × 2 entries: most payloads fit inline.
        let mut stack: SmallVec<[(&Scalar, usize); 32]> = smallvec::smallvec![(e, 1usize)];
        while let Some((e, d)) = stack.pop() {
            let replaced = matches!(e, Scalar::In(i) if slots.get(*i).copied().unwrap_or(false));
            let (depth, size) = if replaced {
                out.dims |= inserted.dims;
                out.loads |= inserted.loads;
                (d - 1 + inserted.depth, inserted.size)
            } else {
                out.dims |= matches!(e, Scalar::Dim(_));
                out.loads |= matches!(e, Scalar::Load(..));
                (d, 1)
            };
            out.depth = out.depth.max(depth);
            out.size = out.size.saturating_add(size);
            stack.extend(e.children().map(|c| (c, d + 1)));
        }
        out
    }

    fn fits(self) -> bool {
        self.depth <= MAX_TREE_DEPTH && self.size <= MAX_FUSED_NODES
    }
}

/// The shapes of a kernel's body and epilogue, and the largest of a row kernel's statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shapes {
    body: Shape,
    epilogue: Option<Shape>,
    /// The deepest and the largest payload of the statistics (bodies and epilogues), and
    /// whether any reads domain indices or offsets.
    stats: Option<Shape>,
}

impl Shapes {
    fn fit(&self) -> bool {
        self.body.fits()
            && self.epilogue.is_none_or(Shape::fits)
            && self.stats.is_none_or(Shape::fits)
    }

    fn of(k: &LKernel) -> Shapes {
        Shapes {
            body: Shape::of(&k.body),
            epilogue: k.epilogue.as_ref().map(Shape::of),
            stats: stat_shapes(k, &mut Shape::of),
        }
    }
}

/// The largest of `shape` over the payloads of `k`'s statistics (`None`: it has none).
fn stat_shapes(k: &LKernel, shape: &mut dyn FnMut(&Scalar) -> Shape) -> Option<Shape> {
    k.stats.iter().flat_map(|st| std::iter::once(&st.body).chain(st.epilogue.as_ref())).fold(
        None,
        |acc, e| {
            let s = shape(e);
            Some(acc.map_or(s, |a: Shape| Shape {
                depth: a.depth.max(s.depth),
                size: a.size.max(s.size),
                dims: a.dims || s.dims,
                loads: a.loads || s.loads,
            }))
        },
    )
}

/// The shapes of the kernel fusing `p` into `k` (reading `p`'s output `t`), or `None` when a
/// payload would exceed [`MAX_TREE_DEPTH`] or [`MAX_FUSED_NODES`]. Walks `k`'s payloads only.
fn fused_shapes(ps: Shapes, k: &LKernel, t: Tid, epilogue: bool) -> Option<Shapes> {
    let slots: SmallVec<[bool; 8]> = k.inputs.iter().map(|o| o.t == t).collect();
    let shapes = if epilogue {
        // K's body becomes P's epilogue (with P's result `acc` for T); P's body stays.
        let acc = ps.epilogue.unwrap_or(LEAF);
        let e = Shape::substituted(&k.body, &slots, acc);
        // `into_epilogue` drops an epilogue that is `acc` itself.
        let is_acc =
            ps.epilogue.is_none() && matches!(k.body, Scalar::In(i) if slots.get(i) == Some(&true));
        Shapes { body: ps.body, epilogue: (!is_acc).then_some(e), stats: None }
    } else {
        let mut sub = |e: &Scalar| Shape::substituted(e, &slots, ps.body);
        Shapes {
            body: sub(&k.body),
            epilogue: k.epilogue.as_ref().map(&mut sub),
            stats: stat_shapes(k, &mut sub),
        }
    };
    shapes.fit().then_some(shapes)
}

/// [`renumber`] without rebuilding the tree; no walk at all when `to` is the identity (a chain
/// fused into its next op keeps its operand slots).
fn renumber_in_place(e: &mut Scalar, to: &[usize]) {
    if to.iter().enumerate().all(|(i, &j)| i == j) {
        return;
    }
    let mut stack: SmallVec<[&mut Scalar; 32]> = smallvec::smallvec![e];
    while let Some(e) = stack.pop() {
        match e {
            Scalar::In(k) => *k = to[*k],
            Scalar::Load(k, off) => {
                *k = to[*k];
                stack.push(off);
            }
            Scalar::Un(_, a) => stack.push(a),
            Scalar::Bin(_, a, b) => {
                stack.push(a);
                stack.push(b);
            }
            Scalar::Select(c, a, b) => {
                stack.push(c);
                stack.push(a);
                stack.push(b);
            }
            _ => {}
        }
    }
}

/// Fuses `l.kernels` in place; returns how many kernels were fused into others.
///
/// Kernels are visited in launch order, and each one absorbs its fusable producers (the first
/// fusable operand first, again until none is left) before the next is visited: the order in
/// which a rescan from the start after every fusion would find them, since fusing into a kernel
/// never makes an earlier kernel fusable. Reader counts are kept up to date instead of being
/// recomputed, so the work is linear in the number of kernels (times the bounded payload size).
/// A fusion whose payload would exceed [`MAX_TREE_DEPTH`] or [`MAX_FUSED_NODES`] is not made: the
/// tensor stays in storage and a long chain becomes several kernels.
pub(crate) fn fuse(l: &mut Lower<'_>) -> usize {
    let mut u = uses(l);
    let mut shapes: Vec<Shapes> = l.kernels.iter().map(Shapes::of).collect();
    let mut kernels: Vec<Option<LKernel>> =
        std::mem::take(&mut l.kernels).into_iter().map(Some).collect();
    let mut refused: Vec<bool> = vec![false; l.tensors.len()];
    let mut fused = 0;
    for k in 0..kernels.len() {
        while let Some((p, t, epilogue)) = find(l, &kernels, &shapes, &u, &refused, k) {
            let Some(kk) = &kernels[k] else { break };
            // A producer reading its indices is inserted with them substituted, a payload of
            // another shape at each read: the fused kernel is built and measured.
            let substituted = !epilogue && shapes[p].body.dims;
            let small_sum = !epilogue && kernels[p].as_ref().is_some_and(|pk| pk.combine.is_some());
            let built = match (&kernels[p], substituted) {
                // A small sum (`find` checked `unrollable`), inlined as its unrolled terms.
                (Some(pk), _) if small_sum => unrolled(pk).map(|u| inline(u, kk.clone())),
                (Some(pk), true) => Some(inline(pk.clone(), kk.clone())),
                // A row kernel's body changes: built and measured.
                (Some(pk), false) if epilogue && pk.is_row() => Some(into_epilogue(pk, kk)),
                _ => None,
            };
            let merged_shapes = match &built {
                Some(m) => Some(Shapes::of(m)).filter(Shapes::fit),
                None if small_sum => None,
                None => fused_shapes(shapes[p], kk, t, epilogue),
            };
            let Some(merged_shapes) = merged_shapes else {
                refused[t] = true;
                continue;
            };
            let (Some(pk), Some(kk)) = (kernels[p].take(), kernels[k].take()) else { break };
            for old in [&pk, &kk] {
                for r in distinct(&old.inputs) {
                    u.readers[r] -= 1;
                }
            }
            let merged = match built {
                Some(m) => m,
                None if epilogue => into_epilogue(&pk, &kk),
                None => inline(pk, kk),
            };
            debug_assert_eq!(merged_shapes, Shapes::of(&merged), "derived payload shapes");
            for r in distinct(&merged.inputs) {
                u.readers[r] += 1;
            }
            kernels[k] = Some(merged);
            shapes[k] = merged_shapes;
            fused += 1;
        }
    }
    l.kernels = kernels.into_iter().flatten().collect();
    fused
}

/// The distinct tensors `inputs` read.
fn distinct(inputs: &[Operand]) -> SmallVec<[Tid; 8]> {
    let mut ts: SmallVec<[Tid; 8]> = inputs.iter().map(|o| o.t).collect();
    ts.sort_unstable();
    ts.dedup();
    ts
}

/// Writers of every tensor's storage, and how many kernels read each.
struct Uses {
    /// How many kernels write the tensor.
    writers: Vec<usize>,
    /// The first of them (meaningful where `writers` is 1).
    writer: Vec<usize>,
    /// Distinct kernels reading the tensor.
    readers: Vec<usize>,
    shared: Vec<bool>,
    gathered: Vec<bool>,
    pinned: Vec<bool>,
    /// How many kernels write each storage (an in-place update adds a writer to its storage).
    storage_writers: Vec<usize>,
}

fn uses(l: &Lower<'_>) -> Uses {
    let n = l.tensors.len();
    let mut u = Uses {
        writers: vec![0; n],
        writer: vec![0; n],
        readers: vec![0; n],
        shared: vec![false; n],
        gathered: vec![false; n],
        pinned: vec![false; n],
        storage_writers: vec![0; l.storages.len()],
    };
    let mut per_storage = vec![0usize; l.storages.len()];
    for t in &l.tensors {
        per_storage[t.storage] += 1;
    }
    for (i, t) in l.tensors.iter().enumerate() {
        u.shared[i] = per_storage[t.storage] > 1;
    }
    for &t in &l.pinned {
        u.pinned[t] = true;
    }
    for (i, k) in l.kernels.iter().enumerate() {
        if u.writers[k.out.t] == 0 {
            u.writer[k.out.t] = i;
        }
        u.writers[k.out.t] += 1;
        u.storage_writers[l.tensors[k.out.t].storage] += 1;
        for t in distinct(&k.inputs) {
            u.readers[t] += 1;
        }
        for o in &k.inputs {
            u.gathered[o.t] |= o.gather;
        }
    }
    u
}

/// Whether `p` (of payload shapes `ps`) computes all of its output pointwise over the output's
/// own index space.
fn pointwise(k: &LKernel, ps: Shapes, shape: &[u64]) -> bool {
    !shape.is_empty()
        && k.combine.is_none()
        && k.stats.is_empty()
        && k.attention.is_none()
        && k.domain == shape
        && !ps.body.loads
        && is_identity(&k.out.map, shape.len())
}

/// Whether `map` is the identity of `rank` dimensions.
fn is_identity(map: &[fbc_index::Expr], rank: usize) -> bool {
    map.len() == rank && super::is_identity(map)
}

/// The next fusion into kernel `k`: (producer index, the tensor, as epilogue).
fn find(
    l: &Lower<'_>,
    kernels: &[Option<LKernel>],
    shapes: &[Shapes],
    u: &Uses,
    refused: &[bool],
    k: usize,
) -> Option<(usize, Tid, bool)> {
    let kk = kernels[k].as_ref()?;
    // An attention launch computes what its parameters say, not a payload to inline into.
    if kk.attention.is_some() {
        return None;
    }
    for (slot, o) in kk.inputs.iter().enumerate() {
        let t: Tid = o.t;
        // A symbol's operand stays an operand (its element 0 is read when the launch runs).
        if kk.symbols.iter().any(|s| s.operand == slot) {
            continue;
        }
        // `k` reads `t`, so one reader means `k` alone.
        if u.pinned[t]
            || u.shared[t]
            || u.gathered[t]
            || refused[t]
            || u.writers[t] != 1
            || u.readers[t] != 1
        {
            continue;
        }
        let p = u.writer[t];
        if p >= k {
            continue;
        }
        let Some(pk) = kernels[p].as_ref() else { continue };
        // The fused kernel runs where `k` does: no kernel in between may overwrite what `p`
        // reads (an in-place update of storage `p` reads).
        if overwritten_between(l, kernels, u, pk, p, k) {
            continue;
        }
        let shape = &l.tensors[t].shape;
        // Conversions stay explicit kernels (the layout strategies are measured by them).
        if is_conversion(pk) || is_conversion(kk) {
            continue;
        }
        // Inline only where each element of T is computed once: a consumer iterating over
        // more points than T has (a broadcast, a matmul reading T per column) would
        // recompute the producer's body. A decode of packed weights is recomputed on purpose
        // (see `LKernel::decode`).
        let numel: u64 = shape.iter().product();
        // A producer that reads its domain indices (RoPE's half, a mask) reads the consumer's
        // indices through the consumer's map of `t`: only maps over the consumer's dimensions
        // (no symbols) can stand in for them.
        let dims_movable = !shapes[p].body.dims
            || kk.inputs.iter().filter(|i| i.t == t).all(|i| over_dims(&i.map));
        if pointwise(pk, shapes[p], shape)
            && dims_movable
            && (pk.decode || kk.domain.iter().product::<u64>() == numel)
        {
            return Some((p, t, false));
        }
        // Epilogue: P reduces, K is pointwise over T's shape and reads T only at identity.
        let reads_identity =
            kk.inputs.iter().filter(|i| i.t == t).all(|i| is_identity(&i.map, shape.len()));
        let pointwise_over_t = kk.combine.is_none()
            && kk.stats.is_empty()
            && reads_identity
            && kk.domain == *shape
            && !shape.is_empty()
            && !(shapes[k].body.dims || shapes[k].body.loads);
        let identity_out = is_identity(&kk.out.map, shape.len());
        // A reduction's epilogue may write elsewhere than `T`'s own index (a concatenation's
        // copy into its columns): the fused kernel stores through `K`'s map composed with
        // `P`'s, so the product writes its part of the concatenation directly.
        if pointwise_over_t
            && (identity_out || over_dims(&kk.out.map))
            && pk.combine.is_some()
            && shapes[p].epilogue.is_none_or(|e| !(e.dims || e.loads))
        {
            return Some((p, t, true));
        }
        // Row epilogue: the same for a row kernel P, whose body computes T's element.
        if pointwise_over_t
            && identity_out
            && pk.is_row()
            && pk.attention.is_none()
            && kk.symbols.is_empty()
            && same_storage_form(l, t, kk.out.t)
        {
            return Some((p, t, true));
        }
        // A sum over a few terms (LoRA's `(x·A)·B`, rank 8) is inlined as its unrolled sum where
        // `K` computes each element of `T` once: a pointwise `K`, or one reading `T` only in its
        // epilogue, once per output (the base product's epilogue adds the branch).
        let reads_in_body = reads_of(&kk.body, &t_slots(kk, t));
        // (A row kernel reads `T` in each of its passes: not once.)
        let pointwise_reader = kk.combine.is_none() && kk.domain.iter().product::<u64>() == numel;
        let epilogue_reader = kk.combine.is_some()
            && reads_in_body == 0
            && kk.domain[..kk.n_par].iter().product::<u64>() == numel;
        let once = kk.stats.is_empty() && (pointwise_reader || epilogue_reader);
        if once
            && unrollable(pk, shapes[p], shape)
            && kk.inputs.iter().filter(|i| i.t == t).all(|i| over_dims(&i.map))
        {
            return Some((p, t, false));
        }
    }
    None
}

/// Whether tensors `a` and `b` are stored alike (layout and storage type): a row kernel
/// writing `b` instead of `a` then writes the same places of the same kind of storage.
fn same_storage_form(l: &Lower<'_>, a: Tid, b: Tid) -> bool {
    let (sa, sb) = (&l.storages[l.tensors[a].storage], &l.storages[l.tensors[b].storage]);
    sa.layout == sb.layout && sa.ty == sb.ty && l.tensors[a].shape == l.tensors[b].shape
}

/// Whether every variable of `map` is a domain dimension `dK` (no symbol).
fn over_dims(map: &[fbc_index::Expr]) -> bool {
    fn ok(e: &fbc_index::Expr) -> bool {
        use fbc_index::Expr as E;
        match e {
            E::Var(v) => v.strip_prefix('d').is_some_and(|n| n.parse::<usize>().is_ok()),
            E::Const(_) => true,
            E::Neg(a) => ok(a),
            E::Bin(_, a, b) => ok(a) && ok(b),
        }
    }
    map.iter().all(ok)
}

/// Whether a kernel strictly between `p` and `k` writes storage that `pk` (at `p`) reads: moving
/// `pk`'s reads to `k`'s place would then see the new contents. Only storage written by several
/// kernels can be (its first writer comes before any reader).
fn overwritten_between(
    l: &Lower<'_>,
    kernels: &[Option<LKernel>],
    u: &Uses,
    pk: &LKernel,
    p: usize,
    k: usize,
) -> bool {
    overwrites(l, u, pk, kernels[p + 1..k].iter().flatten())
}

/// Whether a kernel of `between` writes storage that `pk` reads, where several kernels write it.
fn overwrites<'k>(
    l: &Lower<'_>,
    u: &Uses,
    pk: &LKernel,
    mut between: impl Iterator<Item = &'k LKernel>,
) -> bool {
    let storage = |t: Tid| l.tensors[t].storage;
    let read: SmallVec<[usize; 8]> = pk
        .inputs
        .iter()
        .filter(|o| u.storage_writers[storage(o.t)] > 1)
        .map(|o| storage(o.t))
        .collect();
    !read.is_empty() && between.any(|w| read.contains(&storage(w.out.t)))
}

fn is_conversion(k: &LKernel) -> bool {
    k.source.iter().any(|&s| s == LayoutOp::Convert.name() || s == LayoutOp::Assign.name())
}

/// The index of operand `o` in `base`, appended (a copy) unless an equal one is there.
fn merge_operand(base: &mut Vec<Operand>, o: &Operand) -> usize {
    base.iter().position(|b| b == o).unwrap_or_else(|| {
        base.push(o.clone());
        base.len() - 1
    })
}

/// [`merge_operand`] of `o`'s tensor read at `o`'s map composed with `with`: no map is built
/// where `with` is the identity and an equal operand is there already.
fn merge_composed(base: &mut Vec<Operand>, o: &Operand, with: &[fbc_index::Expr]) -> usize {
    merge_operand(base, &composed(o, with))
}

/// `o`'s tensor read at `o`'s map composed with `with` (`o` itself where `with` is the identity).
fn composed(o: &Operand, with: &[fbc_index::Expr]) -> Operand {
    if super::is_identity(with) {
        return o.clone();
    }
    Operand { t: o.t, map: compose(&o.map, with), gather: o.gather }
}

/// The most terms of a sum that fusion unrolls into its reader ([`unrolled`]).
pub(crate) const MAX_UNROLLED_TERMS: u64 = 16;

/// Operand slots of `k` reading tensor `t`.
fn t_slots(k: &LKernel, t: Tid) -> Vec<bool> {
    k.inputs.iter().map(|o| o.t == t).collect()
}

/// Whether `p` (of payload shapes `ps`) is a sum of at most [`MAX_UNROLLED_TERMS`] terms per
/// element of its output `shape`, written at its own index, whose body reads only operands
/// (no domain index, no explicit offset): [`unrolled`] then computes it pointwise.
fn unrollable(p: &LKernel, ps: Shapes, shape: &[u64]) -> bool {
    let terms: u64 = p.domain[p.n_par..].iter().product();
    p.combine == Some(Combine::Add)
        && p.stats.is_empty()
        && p.attention.is_none()
        && p.symbols.is_empty()
        && p.split.is_none()
        && !p.decode
        && (1..=MAX_UNROLLED_TERMS).contains(&terms)
        && p.domain[..p.n_par] == *shape
        && is_identity(&p.out.map, shape.len())
        && !(ps.body.dims || ps.body.loads)
        && ps.epilogue.is_none_or(|e| !(e.dims || e.loads))
}

/// Sum `p` ([`unrollable`]) as a pointwise kernel over its parallel dimensions: its body once
/// per point of the reduction (operands read at their maps with the reduction indices fixed),
/// added in the reduction's row-major order, then its epilogue.
fn unrolled(p: &LKernel) -> Option<LKernel> {
    let red = &p.domain[p.n_par..];
    let terms: u64 = red.iter().product();
    let mut inputs: Vec<Operand> = Vec::new();
    // `P`'s operands as they are, for the epilogue (read at the output point).
    let at_point: Vec<usize> = p.inputs.iter().map(|o| merge_operand(&mut inputs, o)).collect();
    let mut sum: Option<Scalar> = None;
    for r in 0..terms {
        let mut with: Vec<fbc_index::Expr> = (0..p.n_par).map(super::dim).collect();
        let mut rest = r;
        let mut point = vec![0i64; red.len()];
        for (j, &n) in red.iter().enumerate().rev() {
            point[j] = i64::try_from(rest % n).ok()?;
            rest /= n;
        }
        with.extend(point.into_iter().map(fbc_index::Expr::Const));
        let to: SmallVec<[usize; 8]> =
            p.inputs.iter().map(|o| merge_composed(&mut inputs, o, &with)).collect();
        let term = renumber(&p.body, &to);
        sum = Some(match sum {
            None => term,
            Some(s) => Scalar::Bin(ScalarBin::Add, Box::new(s), Box::new(term)),
        });
    }
    let sum = sum?;
    // The epilogue's operands are read at the output point: their maps name no reduction index.
    let reduction: Vec<String> = (p.n_par..p.domain.len()).map(fbc_index::dim_name).collect();
    if let Some(e) = &p.epilogue {
        let mut named = false;
        e.visit(&mut |s| {
            if let Scalar::In(i) = s {
                named |=
                    p.inputs[*i].map.iter().any(|x| reduction.iter().any(|d| x.vars().contains(d)));
            }
        });
        if named {
            return None;
        }
    }
    let body = match &p.epilogue {
        None => sum,
        Some(e) => map_scalar(&renumber(e, &at_point), &mut |s| match s {
            Scalar::Acc => Some(sum.clone()),
            _ => None,
        }),
    };
    // Only the operands the body reads stay: `P`'s own that no term or epilogue reads at them
    // (the factors, read at fixed reduction indices instead) name reduction dimensions, which
    // the pointwise domain does not have.
    let (kept, body) = super::split_k::only_read(&body, &inputs);
    Some(LKernel {
        domain: p.domain[..p.n_par].to_vec(),
        inputs: kept,
        body,
        combine: None,
        epilogue: None,
        ..p.clone()
    })
}

/// `P` substituted into `K` at every read of `P`'s output. Both are consumed: `P`'s body moves
/// into the last read of its output (earlier reads get copies), so a fusion copies no more than
/// the reads beyond the first.
fn inline(p: LKernel, k: LKernel) -> LKernel {
    let t = p.out.t;
    let mut inputs: Vec<Operand> = Vec::new();
    // K's operands other than T keep their order.
    let mut k_to: Vec<Option<usize>> = Vec::new();
    for o in &k.inputs {
        if o.t == t {
            k_to.push(None);
        } else {
            k_to.push(Some(merge_operand(&mut inputs, o)));
        }
    }
    // Each read of T at map m: P's body with P's operands read at (P map ∘ m).
    let mut subst: Vec<Option<Scalar>> = vec![None; k.inputs.len()];
    let slots = t_slots(&k, t);
    let mut left = payloads(&k).map(|e| reads_of(e, &slots)).sum::<usize>();
    let t_reads: Vec<usize> = (0..k.inputs.len()).filter(|&i| slots[i]).collect();
    let mut p_body = Some(p.body);
    let mut p_dims = false;
    if let Some(b) = &p_body {
        b.visit(&mut |s| p_dims |= matches!(s, Scalar::Dim(_)));
    }
    for (n, &slot) in t_reads.iter().enumerate() {
        let with = &k.inputs[slot].map;
        let to: SmallVec<[usize; 8]> =
            p.inputs.iter().map(|pi| merge_composed(&mut inputs, pi, with)).collect();
        // The last slot renumbers P's body in place; the others renumber a copy.
        let body = if n + 1 == t_reads.len() {
            p_body.take().map(|mut b| {
                renumber_in_place(&mut b, &to);
                b
            })
        } else {
            p_body.as_ref().map(|b| renumber(b, &to))
        };
        // P's index `i` is K's read of T at `with[i]` (`find` checked `with` names dimensions).
        subst[slot] = match body {
            Some(b) if p_dims => {
                let dims: Vec<Scalar> = with.iter().map(super::storage::expr_scalar).collect();
                Some(super::storage::subst_dims(&b, &dims))
            }
            b => b,
        };
    }
    // The last read takes the expression itself, earlier ones a copy.
    let mut take = |i: usize| -> Option<Scalar> {
        left = left.saturating_sub(1);
        if left == 0 {
            subst[i].take()
        } else {
            subst[i].clone()
        }
    };
    let mut subst = |e: &Scalar| {
        map_scalar(e, &mut |s| match s {
            Scalar::In(i) => Some(match k_to[*i] {
                None => take(*i).unwrap_or_else(|| s.clone()),
                Some(j) => Scalar::In(j),
            }),
            Scalar::Load(i, off) => {
                let off = map_scalar(off, &mut |x| match x {
                    Scalar::In(j) => Some(match k_to[*j] {
                        None => take(*j).unwrap_or(Scalar::In(*j)),
                        Some(jj) => Scalar::In(jj),
                    }),
                    _ => None,
                });
                Some(Scalar::Load(k_to[*i].unwrap_or(*i), Box::new(off)))
            }
            _ => None,
        })
    };
    let body = subst(&k.body);
    let epilogue = k.epilogue.as_ref().map(&mut subst);
    let stats = k
        .stats
        .iter()
        .map(|st| Stat {
            combine: st.combine,
            body: subst(&st.body),
            epilogue: st.epilogue.as_ref().map(&mut subst),
        })
        .collect();
    // A symbol's operand is never fused away (`find`): it keeps a slot.
    let symbols = k
        .symbols
        .iter()
        .map(|s| fbc_dialects::memory::Symbol {
            operand: k_to[s.operand].unwrap_or(s.operand),
            ..*s
        })
        .collect();
    // K's note (`[in place]`) follows K's op, which then comes first.
    let source = if k.note.is_empty() {
        p.source.iter().chain(&k.source).copied().collect()
    } else {
        k.source.iter().chain(&p.source).copied().collect()
    };
    LKernel { inputs, body, epilogue, stats, symbols, source, ..k }
}

/// Every payload of `k`: body, epilogue, each statistic's body and epilogue.
fn payloads(k: &LKernel) -> impl Iterator<Item = &Scalar> {
    std::iter::once(&k.body)
        .chain(k.epilogue.as_ref())
        .chain(k.stats.iter().flat_map(|st| std::iter::once(&st.body).chain(st.epilogue.as_ref())))
}

/// `K` as the epilogue of reduction `P`, or for a row kernel `P`, `K` with `P`'s body for `T`
/// as `P`'s body.
fn into_epilogue(p: &LKernel, k: &LKernel) -> LKernel {
    let t = p.out.t;
    let mut inputs = p.inputs.clone();
    let row = p.is_row();
    let acc = if row { p.body.clone() } else { p.epilogue.clone().unwrap_or(Scalar::Acc) };
    let mut subst: Vec<Scalar> = Vec::with_capacity(k.inputs.len());
    for o in &k.inputs {
        if o.t == t {
            subst.push(acc.clone());
        } else {
            subst.push(Scalar::In(merge_composed(&mut inputs, o, &p.out.map)));
        }
    }
    let epilogue = map_scalar(&k.body, &mut |s| match s {
        Scalar::In(i) => Some(subst[*i].clone()),
        _ => None,
    });
    let mut source = p.source.clone();
    source.extend(k.source.iter().copied());
    if row {
        return LKernel {
            op: p.op.clone(),
            result: k.result.clone(),
            source,
            inputs,
            out: Operand { t: k.out.t, map: p.out.map.clone(), gather: false },
            body: epilogue,
            ..p.clone()
        };
    }
    LKernel {
        op: p.op.clone(),
        result: k.result.clone(),
        source,
        inputs,
        out: Operand { t: k.out.t, map: compose(&k.out.map, &p.out.map), gather: false },
        epilogue: if epilogue == Scalar::Acc { None } else { Some(epilogue) },
        ..p.clone()
    }
}

/// `e` without its one factor `Stat(0)`, where `e` is a product tree (`*` only) with exactly
/// one such factor and no other statistic: RMSNorm's `x0 * s0 * x1` gives `x0 * x1`.
fn without_stat(e: &Scalar) -> Option<Scalar> {
    fn stats(e: &Scalar) -> usize {
        let mut n = 0;
        e.visit(&mut |s| n += usize::from(matches!(s, Scalar::Stat(_))));
        n
    }
    match e {
        Scalar::Bin(ScalarBin::Mul, a, b) => match (**a == Scalar::Stat(0), **b == Scalar::Stat(0))
        {
            (true, _) if stats(b) == 0 => Some((**b).clone()),
            (_, true) if stats(a) == 0 => Some((**a).clone()),
            _ if stats(b) == 0 => {
                Some(Scalar::Bin(ScalarBin::Mul, Box::new(without_stat(a)?), b.clone()))
            }
            _ if stats(a) == 0 => {
                Some(Scalar::Bin(ScalarBin::Mul, a.clone(), Box::new(without_stat(b)?)))
            }
            _ => None,
        },
        _ => None,
    }
}

/// The slot of `k`'s one read of `t`, where `k` is a contraction over one reduction dimension
/// whose body is that read times a factor that does not read `t`, and whose map of `t` takes
/// the reduction index as `t`'s last index and the parallel indices (no symbol) for the others,
/// over a reduction as long as `t`'s last extent (`last`).
fn linear_reader(k: &LKernel, t: Tid, last: u64) -> Option<usize> {
    let rank = k.domain.len();
    if k.combine != Some(Combine::Add)
        || !k.stats.is_empty()
        || k.attention.is_some()
        || k.decode
        || k.n_par + 1 != rank
        || k.domain[rank - 1] != last
        || !k.symbols.is_empty()
    {
        return None;
    }
    let slots: Vec<bool> = k.inputs.iter().map(|o| o.t == t).collect();
    let slot = slots.iter().position(|&s| s)?;
    if slots.iter().filter(|&&s| s).count() != 1
        || k.epilogue.as_ref().is_some_and(|e| reads_of(e, &slots) > 0)
    {
        return None;
    }
    let Scalar::Bin(ScalarBin::Mul, a, b) = &k.body else { return None };
    let other = match (&**a, &**b) {
        (Scalar::In(i), o) | (o, Scalar::In(i)) if *i == slot => o,
        _ => return None,
    };
    let map = &k.inputs[slot].map;
    let r = fbc_index::dim_name(rank - 1);
    let (Some(lastm), front) = (map.last(), &map[..map.len().saturating_sub(1)]) else {
        return None;
    };
    let ok = reads_of(other, &slots) == 0
        && !k.inputs[slot].gather
        && *lastm == fbc_index::Expr::Var(r.clone())
        && over_dims(map)
        && front.iter().all(|e| !e.vars().contains(&r));
    ok.then_some(slot)
}

/// `k` with its operands reordered so that slot `first` comes first (the others keep their
/// order), every payload and symbol renumbered.
fn move_first(mut k: LKernel, first: usize) -> LKernel {
    let n = k.inputs.len();
    // to[old] = new
    let to: Vec<usize> = (0..n)
        .map(|i| match i.cmp(&first) {
            std::cmp::Ordering::Less => i + 1,
            std::cmp::Ordering::Equal => 0,
            std::cmp::Ordering::Greater => i,
        })
        .collect();
    let o = k.inputs.remove(first);
    k.inputs.insert(0, o);
    renumber_in_place(&mut k.body, &to);
    if let Some(e) = &mut k.epilogue {
        renumber_in_place(e, &to);
    }
    for st in &mut k.stats {
        renumber_in_place(&mut st.body, &to);
        if let Some(e) = &mut st.epilogue {
            renumber_in_place(e, &to);
        }
    }
    for s in &mut k.symbols {
        s.operand = to[s.operand];
    }
    k
}

/// **Prologue**: a normalisation `P` (a row kernel over its output's shape, one row dimension,
/// the last; one statistic; a body that is the statistic times a factor, RMSNorm's
/// `x · s0 · γ`) whose output `T` has at most [`fbc_target::SKINNY_SIDE`] rows and is read only
/// by contractions over `T`'s last axis as one factor of their product (a decode step's Q, K
/// and V projections of the normalised row: see [`linear_reader`]), none of which reads
/// another's output, moves into each of them, and `P` disappears:
///
/// ```text
/// Σ_k (x·s·γ)[k] · W[k, n]  =  s · Σ_k (x·γ)[k] · W[k, n]
/// ```
///
/// The reader sums the factor (`x · γ`) in `T`'s place, takes `P`'s statistic as its own
/// (combined over the same points: its reduction is `T`'s row), and its epilogue multiplies
/// the sum by it. The normalised input comes first among the reader's operands, so the
/// projections of one row stay siblings. Returns how many normalisations moved. Only where the
/// profile asks for it (`[skinny] norm_prologue`): the skinny kernel computes the statistic
/// once per work-group, the CPU back ends at every output.
pub(crate) fn fuse_prologues(l: &mut Lower<'_>) -> usize {
    if !l.profile.skinny.norm_prologue {
        return 0;
    }
    let mut moved = 0;
    let mut p = 0;
    while p < l.kernels.len() {
        let Some(rewritten) = prologue_readers(l, p) else {
            p += 1;
            continue;
        };
        l.kernels.remove(p);
        for (k, new) in rewritten {
            // Readers come after `p`, now one place earlier.
            l.kernels[k - 1] = new;
        }
        moved += 1;
    }
    moved
}

/// The readers of kernel `p`'s output rewritten as [`fuse_prologues`] says, by index, where
/// `p` and every reader qualify.
fn prologue_readers(l: &Lower<'_>, p: usize) -> Option<Vec<(usize, LKernel)>> {
    let pk = &l.kernels[p];
    let t = pk.out.t;
    let shape = &l.tensors[t].shape;
    let rank = shape.len();
    let last = *shape.last()?;
    let rows: u64 = shape[..rank - 1].iter().product();
    let [stat] = pk.stats.as_slice() else { return None };
    let no_dims = |e: &Scalar| {
        let mut ok = true;
        e.visit(&mut |s| ok &= !matches!(s, Scalar::Dim(_) | Scalar::Load(..) | Scalar::Stat(_)));
        ok
    };
    let factor = without_stat(&pk.body)?;
    if rows > fbc_target::SKINNY_SIDE
        || pk.attention.is_some()
        || !pk.symbols.is_empty()
        || pk.n_par + 1 != rank
        || pk.domain != *shape
        || !is_identity(&pk.out.map, rank)
        || !no_dims(&factor)
        || !no_dims(&stat.body)
        || is_conversion(pk)
        || pk.inputs.iter().any(|o| o.gather)
    {
        return None;
    }
    let u = uses(l);
    if u.pinned[t] || u.shared[t] || u.gathered[t] || u.writers[t] != 1 || u.readers[t] == 0 {
        return None;
    }
    // Where a reader reads another reader's output (gate's `SiLU(acc) · up`) only when the
    // profile says so (`norm_prologue_pairs`): the OpenCL writer runs such a pair in the same
    // work-groups one after the other, and each sums the statistic in turn. On an H100 the
    // 16-layer decode step's up-gate launch took 77 µs with it against 65 µs without, more
    // than the 7.5 µs launch of the normalisation (split-K at 2 work-groups per compute unit).
    let readers: Vec<&LKernel> =
        l.kernels.iter().filter(|k| k.inputs.iter().any(|o| o.t == t)).collect();
    if !l.profile.skinny.norm_prologue_pairs
        && readers.iter().any(|r| readers.iter().any(|o| r.inputs.iter().any(|i| i.t == o.out.t)))
    {
        return None;
    }
    let mut out = Vec::new();
    for (k, kk) in l.kernels.iter().enumerate() {
        if !kk.inputs.iter().any(|o| o.t == t) {
            continue;
        }
        let slot = linear_reader(kk, t, last)?;
        if k <= p || overwrites(l, &u, pk, l.kernels[p + 1..k].iter()) {
            return None;
        }
        // The factor in T's place, then the statistic's body the same way (a kernel of its
        // own whose body is the read of T), its operands merged into the reader's.
        let with_factor = LKernel { body: factor.clone(), stats: Vec::new(), ..pk.clone() };
        let mut fused = inline(with_factor, kk.clone());
        // The product stays first in the launch's source (split-K looks for it there).
        fused.source = kk.source.iter().chain(&pk.source).copied().collect();
        let with_stat = LKernel { body: stat.body.clone(), stats: Vec::new(), ..pk.clone() };
        let reads_t = LKernel { body: Scalar::In(slot), epilogue: None, ..kk.clone() };
        let stat_k = inline(with_stat, reads_t);
        let to: Vec<usize> =
            stat_k.inputs.iter().map(|o| merge_operand(&mut fused.inputs, o)).collect();
        let mut body = stat_k.body;
        renumber_in_place(&mut body, &to);
        fused.stats = vec![Stat { combine: stat.combine, body, epilogue: stat.epilogue.clone() }];
        let scaled = |e: &Scalar| {
            map_scalar(e, &mut |s| {
                (*s == Scalar::Acc).then(|| {
                    Scalar::Bin(ScalarBin::Mul, Box::new(Scalar::Acc), Box::new(Scalar::Stat(0)))
                })
            })
        };
        fused.epilogue = Some(fused.epilogue.as_ref().map_or_else(|| scaled(&Scalar::Acc), scaled));
        // The normalised input (P's first operand, read at the composed map) first.
        let first = pk.inputs.first().and_then(|o| {
            let moved = composed(o, &kk.inputs[slot].map);
            fused.inputs.iter().position(|f| *f == moved)
        });
        let fused = match first {
            Some(i) => move_first(fused, i),
            None => fused,
        };
        out.push((k, fused));
    }
    Some(out)
}
