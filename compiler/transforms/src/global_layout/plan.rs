//! The physical model of `global-layout` (see "The physical model" in [`super`]) for one
//! arrangement of the anchors, kept up to date incrementally while the greedy search tries
//! arrangements.
//!
//! A [`Planner`] holds every value's *preference* (the layout its readers want), its *physical*
//! layout (the layout its producer writes), the requirements that layout violates (the
//! conversions) and the cost. The greedy search changes a few anchors at a time and usually takes
//! the change back; recomputing the whole function for each try made the pass quadratic (chains
//! × tries × ops). [`Planner::set`] instead propagates a change only as far as it reaches:
//!
//! - preferences flow *backward*: a value's preference depends on its readers' requirements and
//!   on the preferences of its flexible readers' results, so a changed anchor re-visits the
//!   anchor's tensor, and a changed preference re-visits the operands of its producer, latest
//!   position first;
//! - physical layouts flow *forward*: an op's results depend on their preferences and on the
//!   operands' physical layouts, so a changed preference or anchor re-evaluates the producer, and a
//!   changed physical layout re-evaluates its readers, earliest position first;
//! - a requirement is re-checked where its layout or its operand's physical layout changed;
//! - a remap view that follows its anchor (`Retile`) is refreshed with the anchor: its layout
//!   and its source requirement (legality answers are memoised per map, shapes and tile).
//!
//! These are the rules [`Planner::recompute`] applies to every value in body order, and SSA puts
//! every reader after the value it reads, so visiting the changed values in position order
//! reaches the same state: after any sequence of [`Planner::set`] and [`Planner::undo`] the
//! planner equals one built from scratch for its arrangement (the tests check this on random
//! arrangements). Costs are summed in the full recomputation's order (anchors, then conversions in
//! body order), so they agree to the last bit, and so do the search's decisions.
//!
//! Every change is logged; [`Planner::undo`] rolls back to a [`Planner::mark`], so a rejected try
//! costs only the ops it touched.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};

use fbc_dialects::kind::LayoutOp;
use fbc_dialects::layout::{Layout, Pack};
use fbc_ir::{FbClass, Module, Op, Type, Value, ValueDef};

use super::{
    adapt, class, compute_time, convert_time, is_copy, layout_of_attr, linear_only, reads_linear,
    tensor_bytes, tileable, Ctx, Strategy,
};
use crate::layout::perf_model::Consumer;

/// An interned layout: an index into the planner's layout table.
type Lid = u32;
const LINEAR: Lid = 0;
/// No preference.
const NONE: Lid = u32::MAX;
/// Not in the function's body.
const OUTSIDE: u32 = u32::MAX;

/// How an op's results get their physical layout.
#[derive(Debug, Clone, Copy)]
enum Rule {
    /// An anchor's `layout.assign`: the arrangement's layout.
    Anchor(usize),
    /// Other layout ops: their attribute.
    Fixed(Lid),
    /// Every kernel under the `convert` strategy.
    Linear,
    /// Linear-only kernels: linear operands, and the result linear unless the kernel writes
    /// what its readers want ([`super::writes_result_in`]: attention).
    LinearIn,
    /// A physical reshape/transpose/broadcast: what its readers want.
    Copy,
    /// An FTD-D kernel (`fblayout`): tile invariance from its primary operand.
    Rigid,
    /// Everything else: what its readers want, else a same-shape operand's tile.
    Flexible,
    /// A remap whose view follows its anchor ([`super::Retile`], by index).
    Retile(usize),
}

/// What an op requires of its operands.
#[derive(Debug, Clone, Copy)]
enum Req {
    Any,
    /// Every operand in the anchor's layout.
    Anchor(usize),
    /// Every operand linear.
    Linear,
    /// Operand 0 (a remap's source) in this layout.
    Source(Lid),
    /// Operand 0 in the source layout of [`super::Retile`] number `i`.
    Retile(usize),
}

#[derive(Debug, Clone, Copy)]
enum Undo {
    Arr(usize, Lid, f64),
    Pref(Value, Lid),
    Phys(Value, Lid),
    Conv((u32, u32), Option<(Lid, f64)>),
    Retile(usize, (Lid, Lid)),
}

/// The physical plan of one function under an arrangement (see the module docs).
pub(super) struct Planner<'a> {
    m: &'a Module,
    cx: &'a Ctx<'a>,
    body: Vec<Op>,
    args: Vec<Value>,
    /// By op index: position in the body, or [`OUTSIDE`].
    pos: Vec<u32>,
    rule: Vec<Rule>,
    req: Vec<Req>,
    /// By op index: a flexible reader (FTI-C/FTD-C, not a copy) passes its result's preference on.
    flexible: Vec<bool>,
    /// By value index: interned type, tileable, seconds to convert it.
    ty: Vec<u32>,
    tileable: Vec<bool>,
    convert_s: Vec<f64>,
    /// The first anchor of each anchored tensor.
    anchor_of: HashMap<Value, usize>,
    layouts: Vec<Layout>,
    ids: HashMap<Layout, Lid>,
    arr: Vec<Lid>,
    /// By value index.
    pref: Vec<Lid>,
    phys: Vec<Lid>,
    /// (position, operand) → (required layout, seconds).
    conv: BTreeMap<(u32, u32), (Lid, f64)>,
    /// Compute seconds of each anchor in its current layout.
    time: Vec<f64>,
    time_memo: Vec<Vec<(Lid, f64)>>,
    adapt_memo: HashMap<(Value, [u64; 2], Pack, Lid), Lid>,
    /// By retile: tile-propagate's (view, source) and the current one.
    retile_static: Vec<(Lid, Lid)>,
    retile_now: Vec<(Lid, Lid)>,
    /// By anchor: the retiles whose view it reads.
    anchor_retiles: Vec<Vec<usize>>,
    /// Tile-level maps by (retile class, tile); `None`: the tile does not move whole.
    tile_maps: HashMap<(usize, [u64; 2]), Option<fbc_index::IndexMap>>,
    log: Vec<Undo>,
    queued_value: Vec<bool>,
    queued_op: Vec<bool>,
}

impl std::fmt::Debug for Planner<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Planner")
            .field("anchors", &self.arr.len())
            .field("converts", &self.conv.len())
            .finish_non_exhaustive()
    }
}

impl<'a> Planner<'a> {
    /// The plan of `arr` (one layout per anchor of `cx`), computed from scratch.
    pub(super) fn new(m: &'a Module, cx: &'a Ctx<'a>, arr: &[Layout]) -> Planner<'a> {
        let f = m.func(cx.func);
        let body = f.body.clone();
        let args = f.args.clone();
        let (n_ops, n_values) = (m.ops.len(), m.values.len());
        let mut pl = Planner {
            m,
            cx,
            body,
            args,
            pos: vec![OUTSIDE; n_ops],
            rule: vec![Rule::Flexible; n_ops],
            req: vec![Req::Any; n_ops],
            flexible: vec![false; n_ops],
            ty: vec![u32::MAX; n_values],
            tileable: vec![false; n_values],
            convert_s: vec![0.0; n_values],
            anchor_of: HashMap::new(),
            layouts: vec![Layout::Linear],
            ids: HashMap::from([(Layout::Linear, LINEAR)]),
            arr: Vec::new(),
            pref: vec![NONE; n_values],
            phys: vec![LINEAR; n_values],
            conv: BTreeMap::new(),
            time: Vec::new(),
            time_memo: vec![Vec::new(); cx.anchors.len()],
            adapt_memo: HashMap::new(),
            retile_static: Vec::new(),
            retile_now: Vec::new(),
            anchor_retiles: vec![Vec::new(); cx.anchors.len()],
            tile_maps: HashMap::new(),
            log: Vec::new(),
            queued_value: vec![false; n_values],
            queued_op: vec![false; n_ops],
        };
        for (k, a) in cx.anchors.iter().enumerate() {
            pl.anchor_of.entry(a.tensor).or_insert(k);
        }
        let mut types: rustc_hash::FxHashMap<&Type, u32> = Default::default();
        let mut values: Vec<Value> = pl.args.clone();
        for &op in &pl.body {
            values.extend(m.op(op).results.iter().copied());
        }
        for v in values {
            let n = types.len() as u32;
            pl.ty[v.index()] = *types.entry(m.value_type(v)).or_insert(n);
            pl.tileable[v.index()] = tileable(m, v);
            pl.convert_s[v.index()] = convert_time(cx.p, tensor_bytes(m, v));
        }
        let mut retile_of = HashMap::new();
        for (i, r) in cx.retiles.iter().enumerate() {
            retile_of.insert(r.op, i);
            pl.anchor_retiles[r.anchor].push(i);
            let st = (pl.intern(&r.view), pl.intern(&r.source_req));
            pl.retile_static.push(st);
        }
        pl.retile_now = pl.retile_static.clone();
        for (i, &op) in pl.body.clone().iter().enumerate() {
            pl.pos[op.index()] = i as u32;
            let d = m.op(op);
            let c = class(m, op);
            pl.flexible[op.index()] =
                matches!(c, Some(FbClass::FtiC | FbClass::FtdC)) && !is_copy(d);
            let anchor = cx.by_assign.get(&op).copied();
            let retile = retile_of.get(&op).copied();
            pl.rule[op.index()] = if let Some(k) = anchor {
                Rule::Anchor(k)
            } else if let Some(i) = retile {
                Rule::Retile(i)
            } else if LayoutOp::Assign.is(d) {
                Rule::Fixed(pl.intern_attr(d.attr("layout")))
            } else if LayoutOp::Convert.is(d) {
                Rule::Fixed(pl.intern_attr(d.attr("to")))
            } else if LayoutOp::Remap.is(d) {
                Rule::Fixed(pl.intern_attr(d.attr("fbc.layout")))
            } else if cx.strategy == Strategy::Convert {
                Rule::Linear
            } else if linear_only(d) {
                Rule::LinearIn
            } else if is_copy(d) {
                Rule::Copy
            } else if cx.strategy == Strategy::FbLayout && c == Some(FbClass::FtdD) {
                Rule::Rigid
            } else {
                Rule::Flexible
            };
            pl.req[op.index()] = if let Some(k) = anchor {
                Req::Anchor(k)
            } else if reads_linear(d) {
                Req::Linear
            } else if let Some(i) = retile {
                Req::Retile(i)
            } else if let Some(l) = cx.remap_source.get(&op) {
                Req::Source(pl.intern(l))
            } else {
                Req::Any
            };
        }
        pl.arr = arr.iter().map(|l| pl.intern(l)).collect();
        pl.recompute();
        pl
    }

    fn intern(&mut self, l: &Layout) -> Lid {
        if let Some(&id) = self.ids.get(l) {
            return id;
        }
        let id = self.layouts.len() as Lid;
        self.layouts.push(l.clone());
        self.ids.insert(l.clone(), id);
        id
    }

    fn intern_attr(&mut self, a: Option<&fbc_ir::Attr>) -> Lid {
        match layout_of_attr(a) {
            Some(l) => self.intern(&l),
            None => LINEAR,
        }
    }

    /// The layout anchor `k` has in the current arrangement.
    pub(super) fn anchor_layout(&self, k: usize) -> &Layout {
        &self.layouts[self.arr[k] as usize]
    }

    /// The physical layout of `v` (what its producer writes).
    pub(super) fn phys(&self, v: Value) -> &Layout {
        &self.layouts[self.phys[v.index()] as usize]
    }

    /// Whether `v` is stored as an R-Tile.
    pub(super) fn is_tiled(&self, v: Value) -> bool {
        self.phys[v.index()] != LINEAR
    }

    /// The violated requirements, in body and operand order: (reader, operand, required layout).
    pub(super) fn converts(&self) -> Vec<(Op, usize, Layout)> {
        self.conv
            .iter()
            .map(|(&(p, i), &(req, _))| {
                (self.body[p as usize], i as usize, self.layouts[req as usize].clone())
            })
            .collect()
    }

    /// Σ compute seconds over the anchors.
    pub(super) fn compute_s(&self) -> f64 {
        self.time.iter().sum()
    }

    /// Σ conversion seconds, in body order.
    pub(super) fn convert_s(&self) -> f64 {
        let mut s = 0.0;
        for &(_, t) in self.conv.values() {
            s += t;
        }
        s
    }

    pub(super) fn cost(&self) -> f64 {
        self.compute_s() + self.convert_s()
    }

    /// A point [`Planner::undo`] can return to.
    pub(super) fn mark(&self) -> usize {
        self.log.len()
    }

    /// Rolls every change since `mark` back.
    pub(super) fn undo(&mut self, mark: usize) {
        while self.log.len() > mark {
            match self.log.pop() {
                Some(Undo::Arr(k, l, t)) => {
                    self.arr[k] = l;
                    self.time[k] = t;
                }
                Some(Undo::Pref(v, l)) => self.pref[v.index()] = l,
                Some(Undo::Phys(v, l)) => self.phys[v.index()] = l,
                Some(Undo::Retile(i, old)) => self.retile_now[i] = old,
                Some(Undo::Conv(key, old)) => {
                    match old {
                        Some(x) => self.conv.insert(key, x),
                        None => self.conv.remove(&key),
                    };
                }
                None => {}
            }
        }
    }

    /// Forgets the log: the current state can no longer be undone.
    pub(super) fn commit(&mut self) {
        self.log.clear();
    }

    /// Seconds anchor `k`'s readers take with it in layout `l` (memoised: scoring is the
    /// expensive part, and an anchor sees only a few layouts).
    fn anchor_time(&mut self, k: usize, l: Lid) -> f64 {
        if let Some(&(_, t)) = self.time_memo[k].iter().find(|(seen, _)| *seen == l) {
            return t;
        }
        let t = compute_time(self.cx.p, &self.cx.anchors[k], &self.layouts[l as usize]);
        self.time_memo[k].push((l, t));
        t
    }

    /// The layout `op` requires for operand `i`, `None` for any.
    fn requirement(&self, op: Op, i: usize) -> Option<Lid> {
        match self.req[op.index()] {
            Req::Any => None,
            Req::Anchor(k) => Some(self.arr[k]),
            Req::Linear => Some(LINEAR),
            Req::Source(l) => (i == 0).then_some(l),
            Req::Retile(r) => (i == 0).then_some(self.retile_now[r].1),
        }
    }

    /// What the readers of `v` want: an R-Tile from a requirement or propagated backward through
    /// flexible same-shape ops; else linear when some reader requires linear; else nothing.
    fn preference(&self, v: Value) -> Lid {
        let m = self.m;
        let mut tiled = NONE;
        let mut linear = false;
        let mut note = |l: Lid| {
            if l == LINEAR {
                linear = true;
            } else if l != NONE && tiled == NONE {
                tiled = l;
            }
        };
        for u in &m.value(v).uses {
            let d = m.op(u.op);
            if d.erased {
                continue;
            }
            match self.requirement(u.op, u.index as usize) {
                Some(l) => note(l),
                None => {
                    if self.flexible[u.op.index()] {
                        if let Some(&r) = d.results.first() {
                            if self.ty[r.index()] == self.ty[v.index()] {
                                note(self.pref[r.index()]);
                            }
                        }
                    }
                }
            }
        }
        if tiled != NONE {
            tiled
        } else if linear {
            LINEAR
        } else {
            NONE
        }
    }

    fn arg_layout(&self, a: Value) -> Lid {
        match (self.cx.strategy, self.pref[a.index()]) {
            (Strategy::Convert, _) | (_, NONE) => LINEAR,
            (_, l) => l,
        }
    }

    /// The physical layout of result `r` of `op`.
    fn result_layout(&mut self, op: Op, r: Value) -> Lid {
        let want = self.pref[r.index()];
        match self.rule[op.index()] {
            Rule::Anchor(k) => self.arr[k],
            Rule::Fixed(l) => l,
            Rule::Retile(i) => self.retile_now[i].0,
            Rule::Linear => LINEAR,
            _ if !self.tileable[r.index()] => LINEAR,
            Rule::LinearIn => {
                let ok = want != NONE
                    && super::writes_result_in(self.m.op(op), &self.layouts[want as usize]);
                if ok {
                    want
                } else {
                    LINEAR
                }
            }
            Rule::Copy => {
                if want == NONE {
                    LINEAR
                } else {
                    want
                }
            }
            Rule::Rigid => self.kernel_layout(op, r, want),
            Rule::Flexible if want != NONE => want,
            Rule::Flexible => {
                // Forward propagation: adopt a same-shape tiled operand's layout.
                let m = self.m;
                m.op(op)
                    .operands
                    .iter()
                    .filter(|x| self.ty[x.index()] == self.ty[r.index()])
                    .map(|x| self.phys[x.index()])
                    .find(|&l| l != LINEAR)
                    .unwrap_or(LINEAR)
            }
        }
    }

    /// The layout an FTD-D kernel writes its result `r` in (tile invariance).
    fn kernel_layout(&mut self, op: Op, r: Value, want: Lid) -> Lid {
        if want == LINEAR {
            return LINEAR;
        }
        let m = self.m;
        let primary = super::primary_operand(m, |x| self.is_tiled(x), op);
        let Some(Layout::RTile(t)) = primary.map(|x| self.phys(x)) else {
            return if want == NONE { LINEAR } else { want };
        };
        let key = (r, t.tile, t.pack, want);
        if let Some(&l) = self.adapt_memo.get(&key) {
            return l;
        }
        let (cands, consumers): (&[_], Vec<Consumer>) = match self.anchor_of.get(&r) {
            Some(&k) => {
                let a = &self.cx.anchors[k];
                (&a.candidates, a.consumers.iter().map(|c| c.0).collect())
            }
            None => (&[], Vec::new()),
        };
        let prefer = (want != NONE).then(|| &self.layouts[want as usize]);
        let l = adapt(self.cx.p, m, r, t.tile, t.pack, prefer, cands, &consumers);
        let id = match l {
            // Tile invariance stops where the tile is far wider than the result (a rank-8 LoRA
            // product `x·A` in `x`'s 64 × 32 tile would be three quarters padding) and where
            // the result has the columns of a skinny product (`dY·Bᵀ` in `dY`'s 64 × 4 tile):
            // written as an image, the skinny kernel could not split it in one launch; it
            // keeps its own preference, linear without one.
            Some(Layout::RTile(a)) if overpadded(m, r, a.tile) || skinny_columns(m, r) => {
                if want == NONE {
                    LINEAR
                } else {
                    want
                }
            }
            Some(l) => self.intern(&l),
            None => LINEAR,
        };
        self.adapt_memo.insert(key, id);
        id
    }

    /// The full recomputation: every preference in reverse body order, every physical layout in
    /// body order, every requirement.
    pub(super) fn recompute(&mut self) {
        let m = self.m;
        self.log.clear();
        self.conv.clear();
        self.time =
            (0..self.arr.len()).map(|k| self.anchor_time(k, self.arr[k])).collect::<Vec<_>>();
        for i in 0..self.retile_now.len() {
            self.retile_now[i] = self.retile_state(i);
        }
        for &op in self.body.iter().rev() {
            for &r in &m.op(op).results {
                self.pref[r.index()] = NONE;
            }
        }
        for &op in self.body.clone().iter().rev() {
            for &r in &m.op(op).results {
                self.pref[r.index()] = self.preference(r);
            }
        }
        for &a in &self.args {
            self.pref[a.index()] = self.preference(a);
        }
        for &a in &self.args {
            self.phys[a.index()] = self.arg_layout(a);
        }
        for &op in self.body.clone().iter() {
            for &r in &m.op(op).results {
                self.phys[r.index()] = self.result_layout(op, r);
            }
        }
        for (p, &op) in self.body.iter().enumerate() {
            for (i, &x) in m.op(op).operands.iter().enumerate() {
                if let Some(req) = self.requirement(op, i) {
                    if self.phys[x.index()] != req {
                        self.conv.insert((p as u32, i as u32), (req, self.convert_s[x.index()]));
                    }
                }
            }
        }
    }

    /// Position key of a value for the backward pass: arguments first, then results by op.
    fn back_key(&self, v: Value) -> u32 {
        match self.m.value(v).def {
            ValueDef::Result { op, .. } => self.pos[op.index()].saturating_add(1),
            ValueDef::Arg { .. } => 0,
        }
    }

    /// Gives the anchors in `changes` their layouts and updates everything that depends on them.
    pub(super) fn set(&mut self, changes: &[(usize, Layout)]) {
        let m = self.m;
        let mut back: BinaryHeap<(u32, Value)> = BinaryHeap::new();
        let mut fwd: BinaryHeap<Reverse<(u32, Op)>> = BinaryHeap::new();
        let mut reads: Vec<(Op, usize)> = Vec::new();
        let mut args: Vec<Value> = Vec::new();
        for (k, l) in changes {
            let id = self.intern(l);
            if self.arr[*k] == id {
                continue;
            }
            let t = self.anchor_time(*k, id);
            self.log.push(Undo::Arr(*k, self.arr[*k], self.time[*k]));
            self.arr[*k] = id;
            self.time[*k] = t;
            let op = self.cx.anchors[*k].assign;
            for (i, &x) in m.op(op).operands.iter().enumerate() {
                self.queue_back(&mut back, x);
                reads.push((op, i));
            }
            self.queue_fwd(&mut fwd, op);
            // Views that follow this anchor: their layout and their source requirement.
            for r in self.anchor_retiles[*k].clone() {
                let new = self.retile_state(r);
                let old = self.retile_now[r];
                if new == old {
                    continue;
                }
                self.log.push(Undo::Retile(r, old));
                self.retile_now[r] = new;
                let remap = self.cx.retiles[r].op;
                if let Some(&x) = m.op(remap).operands.first() {
                    self.queue_back(&mut back, x);
                    reads.push((remap, 0));
                }
                self.queue_fwd(&mut fwd, remap);
            }
        }
        while let Some((_, v)) = back.pop() {
            self.queued_value[v.index()] = false;
            let new = self.preference(v);
            let old = self.pref[v.index()];
            if new == old {
                continue;
            }
            self.log.push(Undo::Pref(v, old));
            self.pref[v.index()] = new;
            match m.value(v).def {
                ValueDef::Result { op, .. } => {
                    for &x in &m.op(op).operands {
                        self.queue_back(&mut back, x);
                    }
                    self.queue_fwd(&mut fwd, op);
                }
                ValueDef::Arg { .. } => args.push(v),
            }
        }
        for a in args {
            let new = self.arg_layout(a);
            self.update_phys(a, new, &mut fwd, &mut reads);
        }
        while let Some(Reverse((_, op))) = fwd.pop() {
            self.queued_op[op.index()] = false;
            for &r in &m.op(op).results {
                let new = self.result_layout(op, r);
                self.update_phys(r, new, &mut fwd, &mut reads);
            }
        }
        for (op, i) in reads {
            let p = self.pos[op.index()];
            let Some(&x) = m.op(op).operands.get(i) else { continue };
            if p == OUTSIDE {
                continue;
            }
            let new = self
                .requirement(op, i)
                .filter(|&req| self.phys[x.index()] != req)
                .map(|req| (req, self.convert_s[x.index()]));
            let key = (p, i as u32);
            let old = self.conv.get(&key).copied();
            if old != new {
                self.log.push(Undo::Conv(key, old));
                match new {
                    Some(n) => self.conv.insert(key, n),
                    None => self.conv.remove(&key),
                };
            }
        }
    }

    fn update_phys(
        &mut self,
        v: Value,
        new: Lid,
        fwd: &mut BinaryHeap<Reverse<(u32, Op)>>,
        reads: &mut Vec<(Op, usize)>,
    ) {
        let old = self.phys[v.index()];
        if new == old {
            return;
        }
        self.log.push(Undo::Phys(v, old));
        self.phys[v.index()] = new;
        for u in &self.m.value(v).uses {
            if self.pos[u.op.index()] != OUTSIDE {
                self.queue_fwd(fwd, u.op);
                reads.push((u.op, u.index as usize));
            }
        }
    }

    fn queue_back(&mut self, back: &mut BinaryHeap<(u32, Value)>, v: Value) {
        if !std::mem::replace(&mut self.queued_value[v.index()], true) {
            back.push((self.back_key(v), v));
        }
    }

    fn queue_fwd(&mut self, fwd: &mut BinaryHeap<Reverse<(u32, Op)>>, op: Op) {
        let p = self.pos[op.index()];
        if p != OUTSIDE && !std::mem::replace(&mut self.queued_op[op.index()], true) {
            fwd.push(Reverse((p, op)));
        }
    }

    /// The (view, source requirement) of retile `i` with its anchor's current layout: the
    /// anchor's R-Tile and that tile's plain source layout when the map moves whole tiles of
    /// it, else tile-propagate's.
    fn retile_state(&mut self, i: usize) -> (Lid, Lid) {
        let r = &self.cx.retiles[i];
        let fixed = self.retile_static[i];
        let l = self.arr[r.anchor];
        let Layout::RTile(t) = self.layouts[l as usize] else { return fixed };
        if matches!(r.view, Layout::RTile(v) if v.tile == t.tile) {
            return fixed;
        }
        if self.tile_map(i, t.tile).is_none() {
            return fixed;
        }
        match super::view_source(self.cx.p, &r.source, t.tile) {
            Some(src) => (l, self.intern(&src)),
            None => fixed,
        }
    }

    /// The tile-level map of retile `i`'s remap for `tile` (memoised per class), `None` when
    /// the tile does not move whole.
    fn tile_map(&mut self, i: usize, tile: [u64; 2]) -> Option<&fbc_index::IndexMap> {
        let r = &self.cx.retiles[i];
        self.tile_maps
            .entry((r.class, tile))
            .or_insert_with(|| {
                let limits = fbc_index::Limits::default();
                crate::index_elim::legality::check_tile(&r.map, &r.sink, &r.source, tile, &limits)
                    .ok()
            })
            .as_ref()
    }

    /// The remaps whose view moved off tile-propagate's: (remap, view, tile-level map).
    pub(super) fn retiled(&mut self) -> Vec<(Op, Layout, Option<fbc_index::IndexMap>)> {
        let mut out = Vec::new();
        for i in 0..self.retile_now.len() {
            let (view, _) = self.retile_now[i];
            if self.retile_now[i] == self.retile_static[i] {
                continue;
            }
            let l = self.layouts[view as usize].clone();
            let tm = match &l {
                Layout::RTile(t) => self.tile_map(i, t.tile).and_then(|m| m.to_affine()),
                Layout::Linear => None,
            };
            out.push((self.cx.retiles[i].op, l, tm));
        }
        out
    }

    /// The physical layout of every value of the function, as a table by value index.
    pub(super) fn phys_table(&self) -> PhysTable {
        PhysTable { ids: self.phys.clone(), layouts: self.layouts.clone() }
    }

    /// Everything the state determines, for comparing two planners.
    #[cfg(test)]
    fn fingerprint(&self) -> Fingerprint {
        let m = self.m;
        let mut values = self.args.clone();
        for &op in &self.body {
            values.extend(m.op(op).results.iter().copied());
        }
        let pref = values
            .iter()
            .map(|v| {
                let l = self.pref[v.index()];
                (l != NONE).then(|| self.layouts[l as usize].clone())
            })
            .collect();
        Fingerprint {
            arr: (0..self.arr.len()).map(|k| self.anchor_layout(k).clone()).collect(),
            pref,
            phys: values.iter().map(|&v| self.phys(v).clone()).collect(),
            converts: self.converts(),
            cost_bits: [self.compute_s().to_bits(), self.convert_s().to_bits()],
        }
    }
}

/// The physical layout of each value of a planned function (values made later have none).
pub(super) struct PhysTable {
    ids: Vec<Lid>,
    layouts: Vec<Layout>,
}

impl PhysTable {
    pub(super) fn get(&self, v: &Value) -> Option<&Layout> {
        self.ids.get(v.index()).map(|&l| &self.layouts[l as usize])
    }
}

/// A planner's observable state (tests).
#[cfg(test)]
#[derive(Debug, PartialEq)]
struct Fingerprint {
    arr: Vec<Layout>,
    pref: Vec<Option<Layout>>,
    phys: Vec<Layout>,
    converts: Vec<(Op, usize, Layout)>,
    cost_bits: [u64; 2],
}

/// Whether value `v` in tile `tile` has more padding columns than columns: a narrow result (a
/// rank-8 product in a 32-wide tile). Its rows are left alone: a decode step's one-row
/// activations fill a texel's four rows with padding by design (the skinny kernel reads them
/// either way).
fn overpadded(m: &Module, v: Value, tile: [u64; 2]) -> bool {
    matrix(m, v).is_some_and(|x| tile[1] > 0 && x.w.div_ceil(tile[1]) * tile[1] - x.w > x.w)
}

/// Whether value `v` has at most [`fbc_target::SKINNY_SIDE`] columns and more rows than
/// columns: the result of a product the skinny kernel runs with its rows as the wide side.
fn skinny_columns(m: &Module, v: Value) -> bool {
    matrix(m, v).is_some_and(|x| x.w <= fbc_target::SKINNY_SIDE && x.h > x.w)
}

/// Tensor `v` as a batch of matrices (its last two dimensions).
fn matrix(m: &Module, v: Value) -> Option<fbc_dialects::layout::Matrix> {
    let Type::Tensor(ty) = m.value_type(v) else { return None };
    fbc_dialects::layout::Matrix::of(&ty.shape)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use fbc_ir::{PassContext, PassManager, SourceFile};

    use super::*;

    const ATTENTION: &str = include_str!("../../../../examples/attention.fbir");
    const LORA: &str = include_str!("../../../../examples/lora_attention.fbir");

    /// `text` after `pipeline` on `target`.
    fn prepared(text: &str, pipeline: &str, target: &fbc_target::HardwareProfile) -> Module {
        let reg = fbc_dialects::registry();
        let mut m = fbc_ir::parse_module(&Arc::new(SourceFile::new("t.fbir", text)), &reg)
            .unwrap_or_else(|d| panic!("{d:?}"));
        let steps = crate::default_registry().parse_pipeline(pipeline).expect("pipeline");
        let mut cx = PassContext::new(&reg);
        cx.target = target;
        PassManager::new(steps).run(&mut m, &mut cx, &mut |_| {}).expect("pipeline runs");
        m
    }

    /// A deterministic pseudo-random sequence (64-bit LCG, high bits).
    struct Lcg(u64);

    impl Lcg {
        fn below(&mut self, n: usize) -> usize {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((self.0 >> 33) % n.max(1) as u64) as usize
        }
    }

    /// Random sets, undos and commits: after each, the incremental state must equal a planner
    /// built from scratch for the same arrangement, costs to the last bit. Returns how many
    /// states had a view moved to another tile.
    fn check_incremental(m: &Module, p: &fbc_target::HardwareProfile, strategy: Strategy) -> usize {
        let mut m = m.clone();
        let f = m.func_ids().find(|&f| m.func(f).body.len() > 20).expect("a function");
        let (ctx, _) = Ctx::new(&mut m, p, strategy, f);
        assert!(ctx.anchors.len() >= 4, "{} anchors", ctx.anchors.len());
        let prefs: Vec<Layout> = ctx.anchors.iter().map(|a| a.pref.clone()).collect();
        let mut plan = Planner::new(&m, &ctx, &prefs);
        let start = plan.fingerprint();
        // Each anchor's options: its preference, linear, its candidates, and every tile any
        // anchor proposes laid out for it (what the search tries).
        let mut tiles: Vec<[u64; 2]> = Vec::new();
        for a in &ctx.anchors {
            let own = match &a.pref {
                Layout::RTile(t) => Some(t.tile),
                Layout::Linear => None,
            };
            for t in own.into_iter().chain(a.candidates.iter().map(|c| c.tile)) {
                if !tiles.contains(&t) {
                    tiles.push(t);
                }
            }
        }
        let options: Vec<Vec<Layout>> = ctx
            .anchors
            .iter()
            .map(|a| {
                let mut o = vec![a.pref.clone(), Layout::Linear];
                o.extend(a.candidates.iter().map(|&t| Layout::RTile(t)));
                let cons: Vec<Consumer> = a.consumers.iter().map(|c| c.0).collect();
                o.extend(tiles.iter().filter_map(|&t| {
                    adapt(p, &m, a.tensor, t, Pack::W, Some(&a.pref), &a.candidates, &cons)
                }));
                o
            })
            .collect();
        let mut rng = Lcg(0x5eed);
        let mut marks = Vec::new();
        let (mut differed, mut undone, mut retiled) = (0, 0, 0);
        for _ in 0..150 {
            match rng.below(6) {
                0 if !marks.is_empty() => {
                    let mark = marks.swap_remove(rng.below(marks.len()));
                    marks.retain(|&x| x <= mark);
                    plan.undo(mark);
                    undone += 1;
                }
                1 => {
                    plan.commit();
                    marks.clear();
                }
                _ => {
                    marks.push(plan.mark());
                    let changes: Vec<(usize, Layout)> = (0..1 + rng.below(4))
                        .map(|_| {
                            let k = rng.below(options.len());
                            (k, options[k][rng.below(options[k].len())].clone())
                        })
                        .collect();
                    plan.set(&changes);
                }
            }
            let arr: Vec<Layout> =
                (0..ctx.anchors.len()).map(|k| plan.anchor_layout(k).clone()).collect();
            let fresh = Planner::new(&m, &ctx, &arr);
            let got = plan.fingerprint();
            assert!(got == fresh.fingerprint(), "incremental state differs from a recomputation");
            if got.converts != start.converts {
                differed += 1;
            }
            if plan.retile_now != plan.retile_static {
                retiled += 1;
            }
        }
        // The walk must have moved conversions around and rolled changes back.
        assert!(differed > 10 && undone > 5, "differed {differed}, undone {undone}");
        retiled
    }

    #[test]
    fn incremental_equals_recomputation_on_attention() {
        let p = fbc_target::builtin("mali").unwrap();
        let pipeline = crate::pipeline_for_level(3).replace(",global-layout,dce", "");
        let m = prepared(ATTENTION, &pipeline, &p);
        assert!(check_incremental(&m, &p, Strategy::FbLayout) > 10, "views moved");
        check_incremental(&m, &p, Strategy::Convert);
    }

    #[test]
    fn incremental_equals_recomputation_on_a_training_graph() {
        let p = fbc_target::builtin("generic").unwrap();
        let pipeline = format!(
            "autodiff{{func=loss wrt=aq,bq,av,bv}},{}",
            crate::pipeline_for_level(3).replace(",global-layout,dce", "")
        );
        let m = prepared(LORA, &pipeline, &p);
        check_incremental(&m, &p, Strategy::FbLayout);
        check_incremental(&m, &p, Strategy::Reuse);
    }
}
