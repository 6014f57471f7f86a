//! `global-layout{strategy=fblayout|reuse|convert target=}`: global layout selection (paper
//! Sec. 4.4) and the two baselines of Sec. 2.3.
//!
//! # Input
//!
//! What `rtile-select`, `tile-propagate` and `index-elim` leave: an *anchor* is a tensor `%t` read
//! only through `%t_rt = layout.assign %t {layout = L}` (the layout its FTD-D readers want, with
//! its candidates in `fbc.rtile_candidates*`); `layout.remap` views carry the R-Tile they keep in
//! `fbc.layout`, and tile-propagate's `fbc.layout` on a remap's source producer is the tile the
//! view needs its source in.
//!
//! # The physical model (what a kernel writes)
//!
//! Every value gets a physical layout `P` (the layout its producer writes), in body order:
//! - a function argument: the layout its assign wants (the host uploads it in that layout, a
//!   graph-boundary conversion with no IR op: statistic `boundary-converts`, function attribute
//!   `fbc.arg_layouts`), else linear;
//! - `layout.assign`: its `layout`; `layout.convert`: its `to`; `layout.remap`: its view, the
//!   `fbc.layout` tile-propagate gave it, unless the anchor reading the view has moved to another
//!   tile that the remap's map moves whole (the checks of Sec. 4.3.1, re-run for that tile):
//!   then the view is the anchor's layout, so a chain re-tiled by the search does not leave a
//!   conversion behind its view (statistic `retiled-views`; the remap's `fbc.layout` and
//!   `fbc.tile_map` are rewritten);
//! - results that cannot be tiled (rank < 2, integer elements) and results of ops whose kernels
//!   address linear memory ([`linear_only`], and physical `reshape`/`transpose`/`broadcast`
//!   copies): linear;
//! - a flexible op (FTI-C/FTD-C, Table 2): the layout its readers want, propagated *backward*
//!   through flexible ops (its result's *preference*); with no preference, the layout of a
//!   same-shape tiled operand, propagated *forward* (FTD-D dominates); else linear;
//! - an FTD-D op (`fblayout` only): its R-Tile kernel runs in the tile of its *primary operand*
//!   (the largest operand stored as an R-Tile) and writes its result in that tile (tile
//!   invariance, Sec. 4.2), adapted to the result's shape (its preference when the tile agrees,
//!   else [`candidates::physical_mapping`]); linear when its readers want linear (a returned
//!   result: the kernel's last store writes linear) or no operand is tiled (then its preference);
//!   its preference (linear without one) where the tile would give it more padding columns than
//!   columns (a rank-8 LoRA product in a 32-wide tile) or the result has a skinny product's
//!   columns (at most `fbc_target::SKINNY_SIDE`, fewer than its rows).
//!   This is where two consecutive FTD-D ops can disagree (Table 2's yellow cell).
//!
//! A *requirement* is a (reader, layout) pair: an assign requires its `layout`, a remap requires
//! its source in the tile of its view (tile-propagate's source tile, or for a moved view the
//! moved tile in row strips, last axis horizontal), `func.return` and [`linear_only`] ops require
//! linear; every other op reads any layout (its kernel maps indices per operand). Where `P` differs
//! from a requirement the pass inserts an explicit conversion: the assign becomes
//! `layout.convert {from = P, to = L}`, other readers get a `layout.convert` in front. R-Tiles
//! whose image exceeds the profile's `image2d` limits move to `storage = "buffer"`
//! (`buffer-fallbacks`). Producers of R-Tile values get `fbc.layout = P`; linear is the default.
//!
//! # Cost and the greedy search (Sec. 4.4.2)
//!
//! `cost = Σ compute + Σ transformation`, in seconds:
//! - compute: for every anchor and every reduction reading it (`layout::analysis`), the model's
//!   effective throughput `perf = GFLOPS × MemEfficiency` ([`perf_model::score`], GFLOP/s) turns
//!   the op's FLOPs into time: `t = FLOPs / (perf · 10⁹)`, FLOPs = `2·|result|·K` for a matmul,
//!   `|tensor|` for a reduction. So losing score on a big op costs more than on a small one.
//! - transformation: a conversion reads and writes the tensor once:
//!   `2 · bytes / (DRAM bandwidth · 10⁹)`; physical reshape/transpose copies left by index-elim
//!   cost the same (reported, not optimised: equal for every arrangement).
//!
//! A *chain* is a set of anchors linked by conflicts: with every anchor in its own preferred
//! layout, an anchor whose producer is an FTD-D kernel writing another tile needs a conversion;
//! it and the anchor holding that kernel's primary operand are joined. For each chain, candidate
//! tiles (each anchor's preference, then its recorded candidates) are ranked by the size of the
//! tensor proposing them (larger tensors dominate cost) and tried in order (at most
//! [`MAX_TRIES`]): the tile is applied uniformly to the chain's anchors, then each anchor in turn
//! goes back to its own preference (with a conversion) if that lowers the total. The arrangement
//! of minimum cost wins; ties keep the earlier (larger-tensor) one. A chain whose anchors have
//! the same shapes, readers, preferences and candidates as one already searched (the next layer)
//! takes the same decision (`chains-reused`). Each try is evaluated incrementally (submodule
//! `plan`): only the values whose layouts the changed anchors reach are re-simulated, and a
//! rejected try is rolled back, so a search costs the ops it touches, not the function. Counters:
//! `chains`, `chains-reused`, `greedy-tries`, `converts`, `boundary-converts`, `buffer-fallbacks`,
//! `retiled-views`; the record `global-layout` lists each chain's tries and the final costs.
//!
//! # Strategies
//!
//! - `fblayout`: the above.
//! - `reuse` (MNN, Sec. 2.3): each anchor takes the best layout for its *first* (forward)
//!   consumer alone, every producer writes it and every reader reuses it: no conversion, but the
//!   backward consumers run at that layout's score. Run without index elimination.
//! - `convert` (TFLite): each anchor keeps its best single-op layout; every kernel writes linear,
//!   so each R-Tile reader gets an explicit `layout.convert` from linear. Run without index
//!   elimination.
//!
//! All rewrites are identities on logical values (`assign`/`convert` return their operand), so the
//! interpreter gives the same numbers before and after.

mod plan;

use std::collections::HashMap;

use fbc_dialects::kind::{FuncOp, LayoutOp, OpKind, TensorOp as T};
use fbc_dialects::layout::{Intra, Layout, Pack, RTile, Storage};
use fbc_index::IndexMap;
use fbc_ir::pass::{OptionKind, OptionSpec, PassInfo, PassRegistry};
use fbc_ir::{Attr, FbClass, FuncId, Module, Op, OpData, PassContext, Type, Value};
use fbc_target::HardwareProfile;
use serde_json::json;

use crate::layout::analysis::{reduction_uses, value_name};
use crate::layout::perf_model::{self, convert_time, Consumer, TensorDesc};
use crate::layout::rtile::{select, CandidateReader};
use crate::layout::{candidates, conv_model};
use crate::target::{PassResult, TargetOption};
use petgraph::unionfind::UnionFind;
use plan::Planner;

pub const NAME: &str = "global-layout";

/// Most uniform tiles tried per chain: the search stays linear in the chain's size.
pub const MAX_TRIES: usize = 8;

/// Whether an op's kernels address its operands and results as linear memory (gathers, slicing,
/// concatenation, calls across the graph boundary): it reads and writes linear layouts only.
/// RoPE and its adjoint are not: elementwise but for one read rotated along the head, whose map
/// composes with an R-Tile's like any other. Every tensor op answers here.
pub fn linear_only(d: &OpData) -> bool {
    match OpKind::of_op(d) {
        Some(OpKind::Tensor(t)) => match t {
            // Packed weights are bytes in rows of the `.fbw` file's layout.
            T::Dequantize
            | T::Embedding
            | T::EmbeddingGrad
            | T::Slice
            | T::SliceGrad
            | T::Concat
            | T::UpdateSlice
            | T::CausalMask
            | T::Attention => true,
            fbc_dialects::tensor_elementwise_vjps!()
            | fbc_dialects::tensor_elementwise_binary!()
            | fbc_dialects::tensor_elementwise_unary!()
            | fbc_dialects::tensor_reductions!()
            | T::Constant
            | T::Scale
            | T::Select
            | T::Cast
            | T::Rope
            | T::RopeGrad
            | T::Matmul
            // Contractions, row-wise statistics and a copy through affine maps (`lower/ops/conv.rs`).
            | T::Conv2d
            | T::Conv2dGradInput
            | T::Conv2dGradWeight
            | T::GroupNorm
            | T::GroupNormGrad
            | T::Upsample
            | T::Softmax
            | T::Layernorm
            | T::Rmsnorm
            | T::CrossEntropy
            | T::Reshape
            | T::Transpose
            | T::Broadcast
            | T::SoftmaxGrad
            | T::LayernormGrad
            | T::RmsnormGrad
            | T::CrossEntropyGrad
            | T::Unbroadcast
            | T::Ge => false,
        },
        Some(OpKind::Func(FuncOp::Call)) => true,
        Some(OpKind::Func(FuncOp::Return) | OpKind::Layout(_) | OpKind::Memory(_)) | None => false,
    }
}

/// Whether reader `d` requires its operands linear: a [`linear_only`] op, or the function's
/// return (results leave the graph row-major).
pub fn reads_linear(d: &OpData) -> bool {
    FuncOp::Return.is(d) || linear_only(d)
}

/// Whether linear-only op `d` (see [`linear_only`]) writes its result in layout `l` all the
/// same: the attention kernels read linear operands but store each query's outputs through the
/// result's map, so they write an R-Tile whose texels hold four consecutive values of the head
/// (packed along the width, the tile's and any block's width a multiple of 4) and that has no
/// padding (nothing would write it). The attention then writes what its reader wants (a
/// prompt's context in the output projection's tile) with no conversion after it. Every other
/// linear-only op writes linear.
pub fn writes_result_in(d: &OpData, l: &Layout) -> bool {
    match l {
        Layout::Linear => true,
        Layout::RTile(t) => {
            T::of(d.def) == Some(T::Attention)
                && t.pack == Pack::W
                && t.tile[1] % 4 == 0
                && t.pad == [0, 0]
                && match t.intra {
                    Intra::Rows => true,
                    Intra::Block { bw, .. } => bw % 4 == 0,
                }
        }
    }
}

/// Physical copies that stayed in the graph (index-elim fallback, or no index-elim): they read
/// any layout and write linear.
fn is_copy(d: &OpData) -> bool {
    matches!(T::of(d.def), Some(T::Reshape | T::Transpose | T::Broadcast))
}

/// How layouts are chosen (Sec. 4.4 vs the Sec. 2.3 baselines).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    FbLayout,
    Reuse,
    Convert,
}

impl Strategy {
    pub fn parse(s: &str) -> Result<Strategy, String> {
        match s {
            "fblayout" => Ok(Strategy::FbLayout),
            "reuse" => Ok(Strategy::Reuse),
            "convert" => Ok(Strategy::Convert),
            _ => Err(format!("unknown layout strategy `{s}`; expected fblayout, reuse or convert")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Strategy::FbLayout => "fblayout",
            Strategy::Reuse => "reuse",
            Strategy::Convert => "convert",
        }
    }
}

/// Registers `global-layout`.
pub fn register(r: &mut PassRegistry) {
    r.register(PassInfo::new(
        NAME,
        "give every value a physical layout; convert only where needed; greedy search over FTD-D chains (Sec. 4.4)",
        vec![
            OptionSpec::new(
                "strategy",
                OptionKind::Str,
                Some("fblayout"),
                "fblayout (Sec. 4.4), reuse (MNN) or convert (TFLite)",
            ),
            TargetOption::spec(""),
        ],
        |o| {
            let strategy = Strategy::parse(o.str("strategy").unwrap_or("fblayout"))?;
            Ok(Box::new(GlobalLayout { strategy, target: TargetOption::from_options(o)? }))
        },
    ));
}

#[derive(Debug)]
pub struct GlobalLayout {
    pub strategy: Strategy,
    pub target: TargetOption,
}

/// One anchor: a tensor read through a `layout.assign`.
#[derive(Debug, Clone)]
struct Anchor {
    assign: Op,
    tensor: Value,
    /// rtile-select's choice (the best layout for all its readers together).
    pref: Layout,
    desc: TensorDesc,
    /// The reductions reading it, with their FLOPs.
    consumers: Vec<(Consumer, f64)>,
    candidates: Vec<RTile>,
    bytes: u64,
}

/// The layout each anchor is wanted in, by anchor index.
type Arrangement = Vec<Layout>;

/// New layouts for some anchors: (anchor index, layout).
type Changes = Vec<(usize, Layout)>;

/// A `layout.remap` view that an anchor reads (tile-propagate gave the view the anchor's tile).
/// When the search moves the anchor to another tile, the view follows it if the remap's map
/// moves whole tiles of that size (the checks of Sec. 4.3.1,
/// [`crate::index_elim::legality::check_tile`]); the remap then needs its source in that tile.
#[derive(Debug)]
struct Retile {
    op: Op,
    /// The anchor reading the view.
    anchor: usize,
    /// Remaps with the same map and shapes (repeated layers) share their legality answers.
    class: usize,
    map: IndexMap,
    sink: Vec<u64>,
    source: Vec<u64>,
    /// tile-propagate's view (`fbc.layout`) and source requirement.
    view: Layout,
    source_req: Layout,
}

/// A physical plan of one function: `P` per value, and the requirements it violates.
struct Sim {
    phys: plan::PhysTable,
    /// (reader, operand index, required layout) where `P` differs.
    converts: Vec<(Op, usize, Layout)>,
    compute_s: f64,
    convert_s: f64,
    /// Remaps whose view moved to another tile: (remap, view, tile-level map).
    retiled: Vec<(Op, Layout, Option<fbc_index::IndexMap>)>,
}

impl Sim {
    fn cost(&self) -> f64 {
        self.compute_s + self.convert_s
    }
}

struct Ctx<'a> {
    p: &'a HardwareProfile,
    strategy: Strategy,
    func: FuncId,
    anchors: Vec<Anchor>,
    /// assign op → anchor index.
    by_assign: HashMap<Op, usize>,
    /// Source tiles remaps need (the source producer's `fbc.layout` before this pass).
    remap_source: HashMap<Op, Layout>,
    /// The remaps whose view follows the tile of the anchor reading it.
    retiles: Vec<Retile>,
}

fn tensor_bytes(m: &Module, v: Value) -> u64 {
    match m.value_type(v) {
        Type::Tensor(t) => t.shape.iter().product::<u64>().saturating_mul(t.elem.bytes()),
        _ => 0,
    }
}

fn numel(m: &Module, v: Value) -> u64 {
    match m.value_type(v) {
        Type::Tensor(t) => t.shape.iter().product::<u64>(),
        _ => 0,
    }
}

fn tileable(m: &Module, v: Value) -> bool {
    matches!(m.value_type(v), Type::Tensor(t) if t.rank() >= 2 && t.elem.is_float())
}

fn class(m: &Module, op: Op) -> Option<FbClass> {
    let d = m.op(op);
    match d.attr("fbc.class").and_then(Attr::as_str) {
        Some("FTD-D") => Some(FbClass::FtdD),
        Some("FTD-C") => Some(FbClass::FtdC),
        Some("FTI-C") => Some(FbClass::FtiC),
        Some("FTI-D") => Some(FbClass::FtiD),
        _ => d.def.class,
    }
}

fn layout_of_attr(a: Option<&Attr>) -> Option<Layout> {
    a.and_then(|a| Layout::from_attr(a).ok())
}

/// Moves an R-Tile whose image the profile cannot hold into a buffer.
fn fit_storage(p: &HardwareProfile, l: Layout) -> (Layout, bool) {
    let Layout::RTile(mut t) = l else { return (l, false) };
    if t.storage != Storage::Image2d {
        return (Layout::RTile(t), false);
    }
    let fits = t.image.is_some_and(|[w, h]| {
        p.image.supported && w <= u64::from(p.image.max_width) && h <= u64::from(p.image.max_height)
    });
    if fits {
        (Layout::RTile(t), false)
    } else {
        t.storage = Storage::Buffer;
        (Layout::RTile(t), true)
    }
}

/// Tile `tile` packed as `pack` laid out for value `v`: `prefer` when it has that tile and
/// packing, else for channel-packed texels the planes of `v`'s own shape
/// ([`conv_model::channel_packed`]: a kernel reading NC4HW4 texels writes its result in them,
/// whatever its spatial extent), else one of `cands` with the tile, else the physical mapping
/// of Sec. 4.2.
#[allow(clippy::too_many_arguments)]
fn adapt(
    p: &HardwareProfile,
    m: &Module,
    v: Value,
    tile: [u64; 2],
    pack: Pack,
    prefer: Option<&Layout>,
    cands: &[RTile],
    consumers: &[Consumer],
) -> Option<Layout> {
    if let Some(Layout::RTile(t)) = prefer {
        if t.tile == tile && t.pack == pack {
            return Some(Layout::RTile(*t));
        }
    }
    if pack == Pack::C {
        let Type::Tensor(ty) = m.value_type(v) else { return None };
        let t = conv_model::channel_packed(p, &ty.shape)?;
        return t.check_type(ty).is_ok().then_some(Layout::RTile(t));
    }
    if let Some(t) = cands.iter().find(|c| c.tile == tile) {
        return Some(Layout::RTile(*t));
    }
    let Type::Tensor(ty) = m.value_type(v) else { return None };
    let t = candidates::physical_mapping(p, &ty.shape, ty.elem.bytes(), tile, consumers)?;
    t.check_type(ty).ok()?;
    Some(fit_storage(p, Layout::RTile(t)).0)
}

/// FLOPs of a reduction reading `v`.
fn flops(m: &Module, v: Value, op: Op, axes: &std::collections::BTreeSet<usize>) -> f64 {
    let d = m.op(op);
    if T::Matmul.is(d) {
        let k: u64 = match m.value_type(v) {
            Type::Tensor(t) => axes.iter().filter_map(|&a| t.shape.get(a)).product(),
            _ => 1,
        };
        let out = d.results.first().map_or(0, |&r| numel(m, r));
        2.0 * out as f64 * k as f64
    } else {
        numel(m, v) as f64
    }
}

/// Seconds the consumers of anchor `a` take with it stored in `l`.
fn compute_time(p: &HardwareProfile, a: &Anchor, l: &Layout) -> f64 {
    a.consumers
        .iter()
        .map(|(c, f)| {
            let perf = perf_model::score(p, &a.desc, l, c)
                .map(|s| s.perf)
                .filter(|x| *x > 0.0)
                .or_else(|| {
                    perf_model::score(p, &a.desc, &Layout::Linear, c)
                        .map(|s| s.perf)
                        .filter(|x| *x > 0.0)
                });
            perf.map_or(0.0, |g| f / (g * 1e9))
        })
        .sum()
}

impl<'a> Ctx<'a> {
    fn new(
        m: &mut Module,
        p: &'a HardwareProfile,
        strategy: Strategy,
        func: FuncId,
    ) -> (Ctx<'a>, i64) {
        let mut anchors = Vec::new();
        let mut by_assign = HashMap::new();
        let mut buffer_fallbacks = 0;
        let mut reader = CandidateReader::default();
        for op in m.func(func).body.clone() {
            let d = m.op(op);
            if !LayoutOp::Assign.is(d) || d.operands.is_empty() {
                continue;
            }
            let tensor = d.operands[0];
            let Some(pref) = layout_of_attr(d.attr("layout")) else { continue };
            let (pref, moved) = fit_storage(p, pref);
            if moved {
                buffer_fallbacks += 1;
                m.set_attr(op, "layout", pref.to_attr());
            }
            let Type::Tensor(ty) = m.value_type(tensor) else { continue };
            let desc = TensorDesc { shape: ty.shape.to_vec(), elem_bytes: ty.elem.bytes() };
            let consumers = reduction_uses(m, tensor)
                .into_iter()
                .filter_map(|u| u.consumer.map(|c| (c, flops(m, tensor, u.op, &u.axes), u.op)))
                .collect::<Vec<_>>();
            let candidates = match reader.read(m, tensor) {
                Some(Ok(c)) => c
                    .into_iter()
                    .map(|t| fit_storage(p, Layout::RTile(t)).0)
                    .filter_map(|l| match l {
                        Layout::RTile(t) => Some(t),
                        Layout::Linear => None,
                    })
                    .collect(),
                _ => Vec::new(),
            };
            let pref = match strategy {
                // MNN: the layout of the first forward consumer, reused by every other reader.
                Strategy::Reuse => {
                    let first = consumers
                        .iter()
                        .find(|(_, _, o)| m.op(*o).attr("fbc.backward").is_none())
                        .or(consumers.first());
                    match first {
                        Some((c, _, _)) => {
                            let mut cands = candidates.clone();
                            if let Layout::RTile(t) = pref {
                                if !cands.contains(&t) {
                                    cands.push(t);
                                }
                            }
                            let sel = select(p, &desc, &[*c], &cands);
                            sel.scored[sel.best].layout.clone()
                        }
                        None => pref,
                    }
                }
                _ => pref,
            };
            by_assign.insert(op, anchors.len());
            anchors.push(Anchor {
                assign: op,
                tensor,
                pref,
                bytes: tensor_bytes(m, tensor),
                desc,
                consumers: consumers.into_iter().map(|(c, f, _)| (c, f)).collect(),
                candidates,
            });
        }
        let mut remap_source = HashMap::new();
        for &op in &m.func(func).body {
            let d = m.op(op);
            if !LayoutOp::Remap.is(d) || d.operands.is_empty() {
                continue;
            }
            if let Some(src) = m.defining_op(d.operands[0]) {
                let sd = m.op(src);
                if !LayoutOp::Assign.is(sd) && !LayoutOp::Convert.is(sd) {
                    if let Some(l) = layout_of_attr(sd.attr("fbc.layout")) {
                        remap_source.insert(op, fit_storage(p, l).0);
                    }
                }
            }
        }
        let retiles = retiles(m, func, &by_assign, &remap_source);
        (Ctx { p, strategy, func, anchors, by_assign, remap_source, retiles }, buffer_fallbacks)
    }

    /// The anchor whose assign result `op` reads as its primary operand, if any.
    fn primary_anchor(&self, m: &Module, plan: &Planner<'_>, op: Op) -> Option<usize> {
        primary_operand(m, |x| plan.is_tiled(x), op)
            .and_then(|x| m.defining_op(x))
            .and_then(|o| self.by_assign.get(&o).copied())
    }

    /// Chains: anchors joined by conflicts under `plan` (each anchor with its preference).
    fn chains(&self, m: &Module, plan: &Planner<'_>) -> Vec<Vec<usize>> {
        let n = self.anchors.len();
        let mut sets: UnionFind<usize> = UnionFind::new(n);
        let mut joined = vec![false; n];
        for (op, _, _) in plan.converts() {
            // The anchor to vary: the converted assign, or the assign reading a converted view.
            let k = if LayoutOp::Remap.is(m.op(op)) {
                let r = m.op(op).results[0];
                m.value(r).uses.iter().find_map(|u| self.by_assign.get(&u.op).copied())
            } else {
                self.by_assign.get(&op).copied()
            };
            let Some(k) = k else { continue };
            // Channel-packed anchors keep the layout the convolution model chose for them: the
            // search's uniform tiles are `pack = "w"` tiles of the Sec. 4.2 mapping.
            let packed_w = |l: &Layout| matches!(l, Layout::RTile(t) if t.pack == Pack::W);
            if !packed_w(plan.anchor_layout(k)) {
                continue;
            }
            // Walk back through flexible ops to the FTD-D kernel that wrote the tensor.
            let mut v = m.op(op).operands[0];
            let mut producer = None;
            while let Some(o) = m.defining_op(v) {
                match class(m, o) {
                    Some(FbClass::FtdD) => {
                        producer = Some(o);
                        break;
                    }
                    Some(FbClass::FtiC | FbClass::FtdC) if !m.op(o).operands.is_empty() => {
                        v = m.op(o).operands[0];
                    }
                    _ => break,
                }
            }
            let Some(j) = producer.and_then(|o| self.primary_anchor(m, plan, o)) else { continue };
            if !packed_w(plan.anchor_layout(j)) {
                continue;
            }
            sets.union(k, j);
            joined[k] = true;
            joined[j] = true;
        }
        // Each set once, in the order of its first anchor (anchors are in program order).
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut group_of: HashMap<usize, usize> = HashMap::new();
        for k in (0..n).filter(|&k| joined[k]) {
            let g = *group_of.entry(sets.find_mut(k)).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
            groups[g].push(k);
        }
        groups.into_iter().filter(|g| g.len() >= 2).collect()
    }

    /// Size-ranked candidate tiles of a chain.
    fn ranked_tiles(&self, chain: &[usize]) -> Vec<[u64; 2]> {
        let mut by_size: Vec<usize> = chain.to_vec();
        by_size.sort_by_key(|&k| (std::cmp::Reverse(self.anchors[k].bytes), k));
        let mut tiles = Vec::new();
        for &k in &by_size {
            if let Layout::RTile(t) = self.anchors[k].pref {
                if !tiles.contains(&t.tile) {
                    tiles.push(t.tile);
                }
            }
        }
        for &k in &by_size {
            for c in &self.anchors[k].candidates {
                if !tiles.contains(&c.tile) {
                    tiles.push(c.tile);
                }
            }
        }
        tiles.truncate(MAX_TRIES);
        tiles
    }
}

/// The layout a remap's source needs for a view in `tile`: tile-propagate's plain source tile,
/// moved to a buffer when the profile cannot hold its image.
fn view_source(p: &HardwareProfile, source: &[u64], tile: [u64; 2]) -> Option<Layout> {
    crate::index_elim::plain_rtile(source, tile).map(|t| fit_storage(p, Layout::RTile(t)).0)
}

/// The remaps of `func` with a source requirement whose view an anchor reads.
fn retiles(
    m: &Module,
    func: FuncId,
    by_assign: &HashMap<Op, usize>,
    remap_source: &HashMap<Op, Layout>,
) -> Vec<Retile> {
    let mut classes: HashMap<(String, Vec<u64>, Vec<u64>), usize> = HashMap::new();
    let mut out = Vec::new();
    for &op in &m.func(func).body {
        let d = m.op(op);
        let Some(source_req) = remap_source.get(&op) else { continue };
        let (Some(Attr::Map(map)), Some(&r), Some(&x)) =
            (d.attr("map"), d.results.first(), d.operands.first())
        else {
            continue;
        };
        let Some(anchor) = m.value(r).uses.iter().find_map(|u| by_assign.get(&u.op).copied())
        else {
            continue;
        };
        let (Type::Tensor(sink), Type::Tensor(source)) = (m.value_type(r), m.value_type(x)) else {
            continue;
        };
        let (sink, source) = (sink.shape.to_vec(), source.shape.to_vec());
        let n = classes.len();
        let class = *classes.entry((map.to_string(), sink.clone(), source.clone())).or_insert(n);
        out.push(Retile {
            op,
            anchor,
            class,
            map: map.clone(),
            sink,
            source,
            view: layout_of_attr(d.attr("fbc.layout")).unwrap_or(Layout::Linear),
            source_req: source_req.clone(),
        });
    }
    out
}

/// The operand an FTD-D kernel takes its tile from: operand 0 (the matmul's `a`, whose rows the
/// result inherits; a reduction's input) when it is an R-Tile, else the largest R-Tile operand.
fn primary_operand(m: &Module, is_tiled: impl Fn(Value) -> bool, op: Op) -> Option<Value> {
    let tiled = |x: &&Value| is_tiled(**x);
    let ops = &m.op(op).operands;
    ops.first()
        .filter(|x| tiled(x))
        .or_else(|| {
            ops.iter().filter(|x| tiled(x)).max_by_key(|&&x| (numel(m, x), std::cmp::Reverse(x.0)))
        })
        .copied()
}

fn layout_text(l: &Layout) -> String {
    match l {
        Layout::Linear => "linear".into(),
        Layout::RTile(t) => format!("{}x{} {}", t.tile[0], t.tile[1], t.storage.name()),
    }
}

fn us(s: f64) -> f64 {
    (s * 1e8).round() / 100.0
}

crate::target::profile_pass!(GlobalLayout, NAME);

impl GlobalLayout {
    fn run_for(&self, m: &mut Module, cx: &mut PassContext<'_>, p: &HardwareProfile) -> PassResult {
        let mut funcs = Vec::new();
        for f in m.func_ids().collect::<Vec<_>>() {
            funcs.push(self.run_func(m, cx, p, f));
        }
        cx.stats.records.insert(
            NAME.into(),
            json!({"strategy": self.strategy.name(), "target": p.name, "functions": funcs}),
        );
        Ok(())
    }
}

impl GlobalLayout {
    fn run_func(
        &self,
        m: &mut Module,
        cx: &mut PassContext<'_>,
        p: &HardwareProfile,
        f: FuncId,
    ) -> serde_json::Value {
        let (ctx, buffer_fallbacks) = Ctx::new(m, p, self.strategy, f);
        cx.stats.add(NAME, "buffer-fallbacks", buffer_fallbacks);
        let prefs: Arrangement = ctx.anchors.iter().map(|a| a.pref.clone()).collect();
        let mut plan = Planner::new(m, &ctx, &prefs);
        let mut chain_records = Vec::new();
        // Layers repeat: a chain with the same anchors (shapes, readers, preferences,
        // candidates) as one already searched gets the same decision without a new search.
        let mut decided: HashMap<String, Arrangement> = HashMap::new();
        if self.strategy == Strategy::FbLayout {
            for chain in ctx.chains(m, &plan) {
                cx.stats.add(NAME, "chains", 1);
                let signature = format!(
                    "{:?}",
                    chain
                        .iter()
                        .map(|&k| {
                            let a = &ctx.anchors[k];
                            (&a.pref, &a.desc, &a.consumers, &a.candidates, plan.anchor_layout(k))
                        })
                        .collect::<Vec<_>>()
                );
                if let Some(layouts) = decided.get(&signature) {
                    let changes: Changes =
                        chain.iter().copied().zip(layouts.iter().cloned()).collect();
                    plan.set(&changes);
                    plan.commit();
                    cx.stats.add(NAME, "chains-reused", 1);
                    continue;
                }
                let base = plan.cost();
                let mut best: Option<(f64, Changes, [u64; 2])> = None;
                let mut tries = Vec::new();
                for tile in ctx.ranked_tiles(&chain) {
                    cx.stats.add(NAME, "greedy-tries", 1);
                    let before_try = plan.mark();
                    let uniform: Changes = chain
                        .iter()
                        .filter_map(|&k| {
                            let a = &ctx.anchors[k];
                            let cons: Vec<Consumer> = a.consumers.iter().map(|c| c.0).collect();
                            let pref = Some(&a.pref);
                            adapt(p, m, a.tensor, tile, Pack::W, pref, &a.candidates, &cons)
                                .map(|l| (k, l))
                        })
                        .collect();
                    plan.set(&uniform);
                    let mut cost = plan.cost();
                    // Transformations only where they pay: an anchor goes back to its own
                    // preference (with a conversion) when that lowers the total.
                    let mut kept_own = Vec::new();
                    for &k in &chain {
                        if *plan.anchor_layout(k) == ctx.anchors[k].pref {
                            continue;
                        }
                        let before_alt = plan.mark();
                        plan.set(&[(k, ctx.anchors[k].pref.clone())]);
                        let c = plan.cost();
                        if c < cost {
                            cost = c;
                            kept_own.push(value_name(m, ctx.anchors[k].tensor));
                        } else {
                            plan.undo(before_alt);
                        }
                    }
                    tries.push(json!({
                        "tile": tile,
                        "cost_us": us(cost),
                        "own_layout_kept": kept_own,
                    }));
                    if best.as_ref().is_none_or(|b| cost < b.0) {
                        let layouts =
                            chain.iter().map(|&k| (k, plan.anchor_layout(k).clone())).collect();
                        best = Some((cost, layouts, tile));
                    }
                    plan.undo(before_try);
                }
                let names: Vec<String> =
                    chain.iter().map(|&k| value_name(m, ctx.anchors[k].tensor)).collect();
                let prefs: Vec<String> =
                    chain.iter().map(|&k| layout_text(&ctx.anchors[k].pref)).collect();
                let mut chosen = json!(null);
                if let Some((cost, layouts, tile)) = best {
                    if cost < base {
                        plan.set(&layouts);
                        chosen = json!(tile);
                    }
                }
                plan.commit();
                decided.insert(
                    signature,
                    chain.iter().map(|&k| plan.anchor_layout(k).clone()).collect(),
                );
                let final_layouts: Vec<String> =
                    chain.iter().map(|&k| layout_text(plan.anchor_layout(k))).collect();
                chain_records.push(json!({
                    "anchors": names,
                    "preferred": prefs,
                    "own_layouts_cost_us": us(base),
                    "tries": tries,
                    "chosen_tile": chosen,
                    "final": final_layouts,
                    "cost_us": us(plan.cost()),
                }));
            }
        }
        let arr: Arrangement =
            (0..ctx.anchors.len()).map(|k| plan.anchor_layout(k).clone()).collect();
        let sim = Sim {
            phys: plan.phys_table(),
            converts: plan.converts(),
            compute_s: plan.compute_s(),
            convert_s: plan.convert_s(),
            retiled: plan.retiled(),
        };
        drop(plan);
        let fallback_s: f64 = m
            .func(f)
            .body
            .iter()
            .filter(|&&o| matches!(T::of(m.op(o).def), Some(T::Reshape | T::Transpose)))
            .filter_map(|&o| m.op(o).results.first().copied())
            .map(|r| convert_time(p, tensor_bytes(m, r)))
            .sum();
        let (converts, boundary) = apply(m, cx, &ctx, &arr, &sim);
        // Without index elimination (the baselines) the report's `transforms.fallback` still
        // reads the physical reshapes/transposes left.
        if self.strategy != Strategy::FbLayout {
            let left = m
                .func(f)
                .body
                .iter()
                .filter(|&&o| matches!(T::of(m.op(o).def), Some(T::Reshape | T::Transpose)))
                .count();
            cx.stats.add("index-elim", "fallback", left as i64);
        }
        json!({
            "func": m.func(f).name,
            "anchors": ctx.anchors.len(),
            "chains": chain_records,
            "converts": converts,
            "boundary_converts": boundary,
            "compute_us": us(sim.compute_s),
            "convert_us": us(sim.convert_s),
            "copy_us": us(fallback_s),
            "total_us": us(sim.cost() + fallback_s),
        })
    }
}

/// Writes the plan into the IR; returns (conversions inserted, boundary uploads).
fn apply(
    m: &mut Module,
    cx: &mut PassContext<'_>,
    ctx: &Ctx<'_>,
    arr: &Arrangement,
    sim: &Sim,
) -> (i64, i64) {
    let f = ctx.func;
    let convert_def = cx.registry.expect(LayoutOp::Convert.name());
    // Anchors take their final layout.
    for (a, l) in ctx.anchors.iter().zip(arr) {
        m.set_attr(a.assign, "layout", l.to_attr());
    }
    let mut converts = 0;
    for (op, i, req) in sim.converts.iter().cloned() {
        let x = m.op(op).operands[i];
        let from = sim.phys.get(&x).cloned().unwrap_or(Layout::Linear);
        let attrs = vec![("from".to_string(), from.to_attr()), ("to".to_string(), req.to_attr())];
        let ty = m.value_type(x).clone();
        let span = m.op(op).span;
        let pos = m.func(f).body.iter().position(|&o| o == op).unwrap_or(0);
        if ctx.by_assign.contains_key(&op) {
            // The assign itself becomes the conversion; its scores stay for the report.
            let mut all = attrs;
            for key in ["fbc.rtile_score", "fbc.linear_score"] {
                if let Some(a) = m.op(op).attr(key) {
                    all.push((key.to_string(), a.clone()));
                }
            }
            let new = m.create_op(f, convert_def, &[x], all, vec![ty], span);
            m.insert_op_at(f, pos, new);
            let (old_r, new_r) = (m.op(op).results[0], m.op(new).results[0]);
            if let Some(n) = m.value(old_r).name.clone() {
                m.set_value_name(new_r, n);
            }
            m.replace_all_uses(old_r, new_r);
            m.erase_op(op);
        } else {
            let new = m.create_op(f, convert_def, &[x], attrs, vec![ty], span);
            m.insert_op_at(f, pos, new);
            let new_r = m.op(new).results[0];
            if let Some(n) = m.value(x).name.clone() {
                m.set_value_name(new_r, format!("{n}_cv"));
            }
            m.set_operand(op, i, new_r);
        }
        converts += 1;
    }
    cx.stats.add(NAME, "converts", converts);
    // Views that followed their anchor to another tile.
    for (op, view, tile_map) in &sim.retiled {
        m.set_attr(*op, "fbc.layout", view.to_attr());
        if let Some(tm) = tile_map {
            m.set_attr(*op, "fbc.tile_map", Attr::Map(tm.clone()));
        }
    }
    cx.stats.add(NAME, "retiled-views", sim.retiled.len() as i64);
    // Producers say what their kernels write.
    for op in m.func(f).body.clone() {
        let d = m.op(op);
        if LayoutOp::of(d.def).is_some() || d.results.len() != 1 {
            continue;
        }
        match sim.phys.get(&d.results[0]) {
            Some(l @ Layout::RTile(_)) => m.set_attr(op, "fbc.layout", l.to_attr()),
            _ => {
                m.remove_attr(op, "fbc.layout");
            }
        }
    }
    // Arguments uploaded in an R-Tile: a conversion at the graph boundary, done by the host.
    let args = m.func(f).args.clone();
    let layouts: Vec<Attr> = args
        .iter()
        .map(|a| match sim.phys.get(a) {
            Some(l @ Layout::RTile(_)) => l.to_attr(),
            _ => Layout::Linear.to_attr(),
        })
        .collect();
    let boundary =
        args.iter().filter(|a| matches!(sim.phys.get(a), Some(Layout::RTile(_)))).count() as i64;
    cx.stats.add(NAME, "boundary-converts", boundary);
    let attrs = &mut m.func_mut(f).attrs;
    attrs.retain(|(k, _)| k != "fbc.arg_layouts");
    if boundary > 0 {
        attrs.push(("fbc.arg_layouts".to_string(), Attr::Array(layouts)));
    }
    (converts, boundary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strategies_parse() {
        for s in ["fblayout", "reuse", "convert"] {
            assert_eq!(Strategy::parse(s).map(Strategy::name), Ok(s));
        }
        assert!(Strategy::parse("mnn").is_err());
    }

    #[test]
    fn conversion_time_is_two_passes_over_dram() {
        let p = fbc_target::builtin("generic").unwrap();
        // 25.6 GB/s: 1 MiB read + written = 2 MiB.
        let t = convert_time(&p, 1 << 20);
        assert!((t - 2.0 * 1048576.0 / 25.6e9).abs() < 1e-12);
    }
}
