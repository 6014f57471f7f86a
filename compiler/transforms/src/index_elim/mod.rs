//! Tile-based index transformation elimination (paper Sec. 4.3): `tile-propagate`, `index-elim`,
//! `index-simplify`.
//!
//! A *chain* is a maximal run of FTI-D index ops (`tensor.reshape`, `tensor.transpose`,
//! `tensor.broadcast`) from a *source* value to a *sink* value that some other op reads.
//!
//! - `tile-propagate` decides, for every chain, whether its composed map moves whole R-Tiles
//!   (`legality`): the sink's tile is the R-Tile `rtile-select` chose for it (the `layout` of the
//!   `layout.assign` reading it), else the source's, else the pass's default. If the tile fails, smaller tiles are tried
//!   (`legality::alternatives`); the first that passes is used. The sink op gets `fbc.layout`
//!   (the R-Tile it keeps) and `fbc.tile_map` (Eq. 3, sink tile → source tile), and the source's
//!   producer inherits the tile if it has no layout yet. A chain with no legal tile gets
//!   `fbc.tile_fallback = "<check>: <why>"` and stays a physical transform. A chain without a
//!   transpose that no reader wants tiled (integer labels flattened for `cross_entropy`, say) is
//!   a linear view: a row-major buffer re-read in order; it gets `fbc.layout = #layout.linear`.
//!   So is a chain with a transpose whose every reader addresses linear memory (a fused
//!   attention reading a projection's heads): those readers read the source through the view's
//!   map in whatever layout its producer writes, where a tiled view would need a conversion.
//! - `index-elim` replaces each legal chain by one `layout.remap` of the source whose map is the
//!   composition of the chain's maps (Eq. 4), so consumers read the source through the map and
//!   the chain's ops die. Statistics: `eliminated` (reshape/transpose ops gone), `fallback`
//!   (reshape/transpose ops still in the graph).
//! - `index-simplify` simplifies every `layout.remap` map with the egg simplifier (`fbc-index`)
//!   under the ranges of the result's indices. Statistics: `divmod-before`, `divmod-after`
//!   (div/mod operations per map, after strength reduction: shifts and masks are not div/mod);
//!   the record `index-simplify` lists every remap (`result`, the map `before` and `after`,
//!   `divmod_before`, `divmod_after`), which `fbc viz` shows.
//!
//! Every rewrite is exact on logical values (a remap gathers exactly what the chain computed), so
//! the interpreter gives the same numbers before and after whichever tile is chosen; the tile only
//! decides whether the physical layout can serve the view without a copy.

pub mod legality;
pub mod maps;

use std::collections::HashMap;

use fbc_dialects::kind::{LayoutOp, TensorOp};
use fbc_dialects::layout::{Intra, Layout, RTile, Storage};
use fbc_index::{IndexMap, Limits, Ranges};
use fbc_ir::pass::{OptionKind, OptionSpec, PassInfo, PassRegistry};
use fbc_ir::{Attr, Diagnostic, Module, Op, OpData, Pass, PassContext, Value};

pub fn register(r: &mut PassRegistry) {
    r.register(PassInfo::new(
        "tile-propagate",
        "check which reshape/transpose chains move whole R-Tiles (Sec. 4.3.1); annotate them",
        vec![
            OptionSpec::new("tile-h", OptionKind::Int, Some("4"), "default tile height"),
            OptionSpec::new("tile-w", OptionKind::Int, Some("4"), "default tile width"),
        ],
        |o| {
            let tile = default_tile(o)?;
            Ok(Box::new(TilePropagate { tile }))
        },
    ));
    r.register(PassInfo::new(
        "index-elim",
        "replace legal reshape/transpose chains by one layout.remap (Sec. 4.3.2, Eq. 3-4)",
        vec![
            OptionSpec::new("tile-h", OptionKind::Int, Some("4"), "default tile height"),
            OptionSpec::new("tile-w", OptionKind::Int, Some("4"), "default tile width"),
        ],
        |o| {
            let tile = default_tile(o)?;
            Ok(Box::new(IndexElim { tile }))
        },
    ));
    r.register(PassInfo::new(
        "index-simplify",
        "simplify layout.remap index maps with e-graph rewriting (mod/div elimination)",
        vec![],
        |_| Ok(Box::new(IndexSimplify)),
    ));
}

fn default_tile(o: &fbc_ir::pass::PassOptions) -> Result<[u64; 2], String> {
    let h = o.int("tile-h").unwrap_or(4);
    let w = o.int("tile-w").unwrap_or(4);
    match (u64::try_from(h), u64::try_from(w)) {
        (Ok(h), Ok(w)) if h > 0 && w > 0 => Ok([h, w]),
        _ => Err(format!("tile-h and tile-w must be positive, found {h} and {w}")),
    }
}

fn is_chain_op(d: &OpData) -> bool {
    matches!(
        TensorOp::of(d.def),
        Some(TensorOp::Reshape | TensorOp::Transpose | TensorOp::Broadcast)
    )
}

fn is_transform(d: &OpData) -> bool {
    matches!(TensorOp::of(d.def), Some(TensorOp::Reshape | TensorOp::Transpose))
}

/// A chain: its ops from the source outwards; the last op's result is the sink.
struct Chain {
    ops: Vec<Op>,
    source: Value,
}

impl Chain {
    fn sink_op(&self) -> Op {
        *self.ops.last().expect("chains are not empty")
    }
}

/// Chains ending at values that a non-chain op (or a return) reads.
fn chains(m: &Module) -> Vec<Chain> {
    let mut out = Vec::new();
    for op in m.all_ops() {
        let d = m.op(op);
        if !is_chain_op(d) || d.results.len() != 1 {
            continue;
        }
        let read_outside = m.value(d.results[0]).uses.iter().any(|u| !is_chain_op(m.op(u.op)));
        if !read_outside {
            continue;
        }
        let mut ops = vec![op];
        let mut source = d.operands[0];
        while let Some(p) = m.defining_op(source).filter(|&p| is_chain_op(m.op(p))) {
            ops.push(p);
            source = m.op(p).operands[0];
        }
        ops.reverse();
        out.push(Chain { ops, source });
    }
    out
}

fn shape(m: &Module, v: Value) -> Option<Vec<u64>> {
    Some(m.value_type(v).as_tensor()?.shape.to_vec())
}

/// The R-Tile an op gives its result: a `layout.assign`'s `layout` (what `rtile-select` writes),
/// or an `fbc.layout` annotation (what this pass writes).
fn layout_tile(m: &Module, op: Option<Op>) -> Option<RTile> {
    let d = m.op(op?);
    let a = if LayoutOp::Assign.is(d) { d.attr("layout") } else { d.attr("fbc.layout") };
    RTile::from_attr(a?).ok()
}

/// The R-Tile the readers of `v` want: the layout of a `layout.assign` reading it.
fn wanted_tile(m: &Module, v: Value) -> Option<RTile> {
    m.value(v).uses.iter().find_map(|u| {
        let d = m.op(u.op);
        LayoutOp::Assign.is(d).then(|| d.attr("layout").and_then(|a| RTile::from_attr(a).ok()))?
    })
}

/// The composed map of a chain (sink index → source index), `None` for unsupported ops.
fn chain_map(m: &Module, c: &Chain) -> Option<IndexMap> {
    let maps: Option<Vec<IndexMap>> = c.ops.iter().map(|&o| maps::op_map(m, o)).collect();
    maps::compose_chain(&maps?)
}

type LegalityKey = (String, Vec<u64>, Vec<u64>, [u64; 2]);

/// Decides one chain's tile; caches by map text, shapes and tile (layers repeat).
fn decide(
    cache: &mut HashMap<LegalityKey, Result<([u64; 2], IndexMap), String>>,
    map: &IndexMap,
    sink: &[u64],
    source: &[u64],
    tile: [u64; 2],
) -> Result<([u64; 2], IndexMap), String> {
    let key = (map.to_string(), sink.to_vec(), source.to_vec(), tile);
    if let Some(hit) = cache.get(&key) {
        return hit.clone();
    }
    let limits = Limits::default();
    let result = match legality::check_tile(map, sink, source, tile, &limits) {
        Ok(tm) => Ok((tile, tm)),
        Err(first) => legality::alternatives(tile)
            .into_iter()
            .find_map(|t| {
                legality::check_tile(map, sink, source, t, &limits).ok().map(|tm| (t, tm))
            })
            .ok_or_else(|| first.to_string()),
    };
    cache.insert(key, result.clone());
    result
}

/// The R-Tile a chain's source (or a sink with no selected R-Tile) keeps: `tile` in row strips,
/// the last axis horizontal, in an image.
pub fn plain_rtile(shape: &[u64], tile: [u64; 2]) -> Option<RTile> {
    let horizontal = shape.len().checked_sub(1)? as u64;
    RTile::for_shape(shape, tile, Intra::Rows, horizontal, Storage::Image2d).ok()
}

fn rtile_attr(shape: &[u64], tile: [u64; 2]) -> Option<Attr> {
    plain_rtile(shape, tile).map(|t| t.to_attr())
}

#[derive(Debug)]
struct TilePropagate {
    tile: [u64; 2],
}

impl Pass for TilePropagate {
    fn name(&self) -> &str {
        "tile-propagate"
    }

    fn run(&mut self, m: &mut Module, cx: &mut PassContext<'_>) -> Result<(), Vec<Diagnostic>> {
        propagate(m, cx, self.tile);
        Ok(())
    }
}

/// Whether `v` has readers and every one reads it as linear memory
/// ([`crate::global_layout::reads_linear`]).
fn linear_readers(m: &Module, v: Value) -> bool {
    let uses = &m.value(v).uses;
    !uses.is_empty() && uses.iter().all(|u| crate::global_layout::reads_linear(m.op(u.op)))
}

/// Annotates every chain's sink op; returns nothing, records counts in `cx.stats`.
fn propagate(m: &mut Module, cx: &mut PassContext<'_>, default: [u64; 2]) {
    let mut cache = HashMap::new();
    for c in chains(m) {
        let sink_op = c.sink_op();
        let sink_value = m.op(sink_op).results[0];
        let (Some(sink), Some(source)) = (shape(m, sink_value), shape(m, c.source)) else {
            continue;
        };
        let Some(map) = chain_map(m, &c) else { continue };
        let chosen = wanted_tile(m, sink_value)
            .or_else(|| layout_tile(m, Some(sink_op)))
            .or_else(|| layout_tile(m, m.defining_op(c.source)));
        let moves_data = c.ops.iter().any(|&o| TensorOp::Transpose.is(m.op(o)));
        if chosen.is_none()
            && (!moves_data || sink.len() < 2 || source.len() < 2 || linear_readers(m, sink_value))
        {
            // Nobody wants a tiled layout here and the chain only re-reads a row-major buffer
            // in order (reshape, broadcast), or every reader addresses linear memory (a fused
            // attention reading a projection's heads, a cache update): a linear view, legal
            // without any tile; its readers read the source through its map in whatever layout
            // the producer writes, with no conversion between them.
            m.set_attr(sink_op, "fbc.layout", Layout::Linear.to_attr());
            m.remove_attr(sink_op, "fbc.tile_fallback");
            cx.stats.add("tile-propagate", "linear-views", 1);
            continue;
        }
        let wanted = chosen.as_ref().map_or(default, |t| t.tile);
        match decide(&mut cache, &map, &sink, &source, wanted) {
            Ok((tile, tile_map)) => {
                // Keep the selected R-Tile whole (intra-tile mapping included) when it holds.
                let attr = match &chosen {
                    Some(t)
                        if t.tile == tile
                            && m.value_type(sink_value)
                                .as_tensor()
                                .is_some_and(|ty| t.check_type(ty).is_ok()) =>
                    {
                        Some(t.to_attr())
                    }
                    _ => rtile_attr(&sink, tile),
                };
                if let Some(a) = attr {
                    m.set_attr(sink_op, "fbc.layout", a);
                }
                if let Some(tm) = tile_map.to_affine() {
                    m.set_attr(sink_op, "fbc.tile_map", Attr::Map(tm));
                }
                m.remove_attr(sink_op, "fbc.tile_fallback");
                if let Some(p) = m.defining_op(c.source) {
                    if m.op(p).attr("fbc.layout").is_none() {
                        if let Some(a) = rtile_attr(&source, tile) {
                            m.set_attr(p, "fbc.layout", a);
                        }
                    }
                }
                cx.stats.add("tile-propagate", "legal-chains", 1);
                if tile != wanted {
                    cx.stats.add("tile-propagate", "adjusted-tiles", 1);
                }
            }
            Err(why) => {
                m.set_attr(sink_op, "fbc.tile_fallback", Attr::Str(why));
                cx.stats.add("tile-propagate", "illegal-chains", 1);
            }
        }
    }
}

#[derive(Debug)]
struct IndexElim {
    tile: [u64; 2],
}

impl Pass for IndexElim {
    fn name(&self) -> &str {
        "index-elim"
    }

    fn run(&mut self, m: &mut Module, cx: &mut PassContext<'_>) -> Result<(), Vec<Diagnostic>> {
        let remap = cx.registry.expect(LayoutOp::Remap.name());
        let before: Vec<Op> = m.all_ops().filter(|&o| is_transform(m.op(o))).collect();
        // Chains not yet analysed (no tile-propagate before us) are analysed now.
        let unanalysed = chains(m).iter().any(|c| {
            let d = m.op(c.sink_op());
            d.attr("fbc.layout").is_none() && d.attr("fbc.tile_fallback").is_none()
        });
        if unanalysed {
            propagate(m, cx, self.tile);
        }
        for c in chains(m) {
            let sink_op = c.sink_op();
            if m.op(sink_op).attr("fbc.tile_fallback").is_some() {
                continue;
            }
            let Some(map) = chain_map(m, &c).and_then(|im| im.to_affine()) else {
                continue;
            };
            let d = m.op(sink_op);
            let (sink_value, func, span) = (d.results[0], d.func, d.span);
            let result_ty = m.value_type(sink_value).clone();
            let Some(sink_shape) = shape(m, sink_value) else { continue };
            let mut attrs = vec![
                ("map".to_string(), Attr::Map(map)),
                ("shape".to_string(), Attr::ints(sink_shape.iter().map(|&x| x as i64))),
            ];
            for key in ["fbc.layout", "fbc.tile_map"] {
                if let Some(a) = d.attr(key) {
                    attrs.push((key.to_string(), a.clone()));
                }
            }
            let new = m.create_op(func, remap, &[c.source], attrs, vec![result_ty], span);
            let pos = m.func(func).body.iter().position(|&o| o == sink_op).expect("in its body");
            m.insert_op_at(func, pos + 1, new);
            let new_value = m.op(new).results[0];
            // The view stands for the chain's result: keep its name, so the IR still reads
            // `%q2` where the source said `%q2`.
            if let Some(name) = m.value(sink_value).name.clone() {
                m.set_value_name(new_value, name);
            }
            // Other chains may still read the sink through chain ops; only outside readers move.
            let outside: Vec<_> = m
                .value(sink_value)
                .uses
                .iter()
                .filter(|u| !is_chain_op(m.op(u.op)))
                .copied()
                .collect();
            for u in outside {
                m.set_operand(u.op, u.index as usize, new_value);
            }
        }
        crate::dce::remove_dead_ops(m);
        let gone = before.iter().filter(|&&o| m.op(o).erased).count();
        let left = m.all_ops().filter(|&o| is_transform(m.op(o))).count();
        cx.stats.add("index-elim", "eliminated", gone as i64);
        cx.stats.add("index-elim", "fallback", left as i64);
        Ok(())
    }
}

#[derive(Debug)]
struct IndexSimplify;

impl Pass for IndexSimplify {
    fn name(&self) -> &str {
        "index-simplify"
    }

    fn run(&mut self, m: &mut Module, cx: &mut PassContext<'_>) -> Result<(), Vec<Diagnostic>> {
        let mut cache: HashMap<(String, Vec<u64>), (Attr, usize, usize)> = HashMap::new();
        let limits = Limits::default();
        let (mut before, mut after) = (0usize, 0usize);
        let mut remaps = Vec::new();
        for op in m.all_ops().collect::<Vec<_>>() {
            let d = m.op(op);
            if !LayoutOp::Remap.is(d) {
                continue;
            }
            let (Some(Attr::Map(map)), Some(shape)) =
                (d.attr("map"), d.attr("shape").and_then(Attr::as_ints))
            else {
                continue;
            };
            let shape: Vec<u64> = shape.iter().map(|&x| x.max(0) as u64).collect();
            let key = (map.to_string(), shape.clone());
            let (attr, b, a) = match cache.get(&key) {
                Some(hit) => hit.clone(),
                None => {
                    let im = map.clone();
                    let mut ranges = Ranges::new();
                    for (dim, &n) in im.dims.iter().zip(&shape) {
                        let _ = ranges.insert(
                            dim.clone(),
                            0,
                            i64::try_from(n).unwrap_or(i64::MAX).max(1),
                        );
                    }
                    let (out, stats) = fbc_index::simplify_map(&im, &ranges, &limits);
                    let attr = out.to_affine().map_or_else(|| Attr::Map(map.clone()), Attr::Map);
                    let entry = (attr, stats.divmod_before, stats.divmod_after);
                    cache.insert(key, entry.clone());
                    entry
                }
            };
            before += b;
            after += a;
            let name = d
                .results
                .first()
                .map(|&r| crate::layout::analysis::value_name(m, r))
                .unwrap_or_default();
            let after_text = match &attr {
                Attr::Map(a) => a.to_string(),
                other => other.to_string(),
            };
            remaps.push(serde_json::json!({
                "result": name,
                "before": map.to_string(),
                "after": after_text,
                "divmod_before": b,
                "divmod_after": a,
            }));
            m.set_attr(op, "map", attr);
        }
        cx.stats.add("index-simplify", "divmod-before", before as i64);
        cx.stats.add("index-simplify", "divmod-after", after as i64);
        cx.stats.records.insert("index-simplify".into(), serde_json::json!({ "remaps": remaps }));
        Ok(())
    }
}
