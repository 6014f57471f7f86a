//! The graph view: a function's ops after the pipeline as a layered drawing.
//!
//! [`op_graph`] builds a petgraph [`DiGraph`] — a node per argument and per op, an edge per use
//! of a value, carrying the value's layout — and [`layout`] draws it the Sugiyama way:
//! 1. **layers** by longest path from the sources (a topological order, petgraph's `toposort`);
//! 2. **dummy vertices** on every edge that spans more than one layer, so that long edges take
//!    part in the ordering and are routed between nodes rather than through them;
//! 3. **ordering** by barycentre sweeps, down and up, keeping the order with the fewest edge
//!    crossings seen ([`crossings`] counts them exactly, by inversions);
//! 4. **coordinates**: each vertex pulled towards the mean position of its neighbours, then
//!    pushed apart (the mean of a left-to-right and a right-to-left pass) so that vertices keep
//!    their order and never overlap.
//!
//! The drawing is deterministic: the same module gives the same SVG text.

use fbc_dialects::kind::{LayoutOp, TensorOp};
use fbc_dialects::layout::Layout;
use fbc_ir::{Attr, FuncId, Module, Value, ValueDef};
use petgraph::algo::toposort;
use petgraph::graph::DiGraph;
use petgraph::visit::EdgeRef;
use petgraph::Direction;

use crate::svg::{colour, num, Svg};

/// What a node stands for; it decides how the node is highlighted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    Arg,
    Op,
    /// `layout.convert`: an explicit conversion (a copy kernel).
    Convert,
    /// `layout.remap`: a reshape/transpose chain replaced by an index map (no copy).
    Remap,
    /// `layout.assign`: where a tensor takes its chosen layout.
    Assign,
    /// A `tensor.reshape` / `tensor.transpose` left in the graph: lowered as a copy.
    Fallback,
    Return,
}

impl NodeKind {
    pub fn class(self) -> &'static str {
        match self {
            NodeKind::Arg => "arg",
            NodeKind::Op => "op",
            NodeKind::Convert => "convert",
            NodeKind::Remap => "remap",
            NodeKind::Assign => "assign",
            NodeKind::Fallback => "fallback",
            NodeKind::Return => "ret",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Node {
    /// The op's name without its dialect (`matmul`), or `arg`.
    pub label: String,
    /// The first result's (or the argument's) SSA name, `%q`; empty for ops without results.
    pub value: String,
    /// That value, when there is one.
    pub handle: Option<Value>,
    /// Hover text: the op, its result types, layout, class and the reason a pass recorded.
    pub detail: String,
    pub kind: NodeKind,
}

#[derive(Debug, Clone)]
pub struct Edge {
    /// The value the edge carries, and its SSA name.
    pub handle: Value,
    pub value: String,
    /// Its layout attribute text, `None` where it has none (row-major).
    pub layout: Option<String>,
}

/// `%name`, or `%N` for an unnamed value.
pub(crate) fn value_name(m: &Module, v: Value) -> String {
    match m.value(v).name.as_deref() {
        Some(n) => format!("%{n}"),
        None => format!("%{}", v.index()),
    }
}

/// The layout attribute a value carries: a `layout.assign`'s `layout`, its producer's
/// `fbc.layout`, or for an argument its entry of the function's `fbc.arg_layouts`.
fn layout_attr(m: &Module, v: Value) -> Option<Attr> {
    match m.value(v).def {
        ValueDef::Arg { func, index } => match m.func(func).attr("fbc.arg_layouts") {
            Some(Attr::Array(a)) => a.get(index as usize).cloned(),
            _ => None,
        },
        ValueDef::Result { op, .. } => {
            let d = m.op(op);
            if LayoutOp::Assign.is(d) { d.attr("layout") } else { d.attr("fbc.layout") }.cloned()
        }
    }
}

/// The text of the layout a value carries ([`layout_attr`]); `#layout.linear` counts as none.
pub fn value_layout(m: &Module, v: Value) -> Option<String> {
    let attr = layout_attr(m, v)?;
    let text = attr.to_string();
    (!matches!(attr, Attr::Unit) && text != "#layout.linear").then_some(text)
}

/// The layout a value carries, `#layout.linear` where it carries none (or none that parses).
pub fn layout_of(m: &Module, v: Value) -> Layout {
    layout_attr(m, v).and_then(|a| Layout::from_attr(&a).ok()).unwrap_or(Layout::Linear)
}

/// The op graph of function `f`.
pub fn op_graph(m: &Module, f: FuncId) -> DiGraph<Node, Edge> {
    let mut g = DiGraph::new();
    let mut node_of = std::collections::HashMap::new();
    let func = m.func(f);
    for &a in &func.args {
        let value = value_name(m, a);
        let mut detail = format!("argument {value} : {}", m.value_type(a));
        if let Some(l) = value_layout(m, a) {
            detail.push_str(&format!("\nlayout {l}"));
        }
        let node =
            Node { label: "arg".into(), value, handle: Some(a), detail, kind: NodeKind::Arg };
        let n = g.add_node(node);
        node_of.insert(a, n);
    }
    for &op in &func.body {
        let d = m.op(op);
        if d.erased {
            continue;
        }
        let kind = if d.def.traits.terminator {
            NodeKind::Return
        } else if LayoutOp::Convert.is(d) {
            NodeKind::Convert
        } else if LayoutOp::Remap.is(d) {
            NodeKind::Remap
        } else if LayoutOp::Assign.is(d) {
            NodeKind::Assign
        } else if matches!(TensorOp::of(d.def), Some(TensorOp::Reshape | TensorOp::Transpose)) {
            NodeKind::Fallback
        } else {
            NodeKind::Op
        };
        let name = d.name();
        let label = name.split_once('.').map_or(name, |(_, n)| n).to_string();
        let value = d.results.first().map(|&r| value_name(m, r)).unwrap_or_default();
        let mut detail = name.to_string();
        for &r in &d.results {
            detail.push_str(&format!("\n{} : {}", value_name(m, r), m.value_type(r)));
        }
        if let Some(&r) = d.results.first() {
            if let Some(l) = value_layout(m, r) {
                detail.push_str(&format!("\nlayout {l}"));
            }
        }
        for key in ["fbc.class", "fbc.conflict", "fbc.tile_fallback", "map", "fbc.tile_map"] {
            if let Some(a) = d.attr(key) {
                let text = a.as_str().map_or_else(|| a.to_string(), str::to_string);
                detail.push_str(&format!("\n{key}: {text}"));
            }
        }
        if kind == NodeKind::Fallback && d.attr("fbc.tile_fallback").is_none() {
            detail.push_str("\nleft as a copy (no layout.remap)");
        }
        let n = g.add_node(Node { label, value, handle: d.results.first().copied(), detail, kind });
        for &v in &d.operands {
            if let Some(&src) = node_of.get(&v) {
                let e = Edge { handle: v, value: value_name(m, v), layout: value_layout(m, v) };
                g.add_edge(src, n, e);
            }
        }
        for &r in &d.results {
            node_of.insert(r, n);
        }
    }
    g
}

/// Node size and spacing of the drawing, in SVG units.
pub const NODE_W: f64 = 132.0;
pub const NODE_H: f64 = 34.0;
const DUMMY_W: f64 = 12.0;
const GAP: f64 = 18.0;
const LAYER_H: f64 = 74.0;
const MARGIN: f64 = 20.0;

/// A laid-out graph: a centre point per node, and per edge the points it passes through
/// (source, the dummy vertices, target).
#[derive(Debug, Clone, PartialEq)]
pub struct Drawing {
    pub node_pos: Vec<(f64, f64)>,
    pub edge_routes: Vec<Vec<(f64, f64)>>,
    pub width: f64,
    pub height: f64,
    /// Crossings between adjacent layers in the final order.
    pub crossings: usize,
    /// Crossings of the initial order (program order), for comparison.
    pub initial_crossings: usize,
}

/// Vertices of the layered graph: real nodes first (same indices as the graph), then dummies.
struct Layered {
    layer: Vec<usize>,
    width: Vec<f64>,
    /// (from, to) between adjacent layers.
    edges: Vec<(usize, usize)>,
    /// Per graph edge, its chain of vertices from source to target.
    chains: Vec<Vec<usize>>,
    layers: Vec<Vec<usize>>,
}

fn layered<N, E>(g: &DiGraph<N, E>) -> Layered {
    let n = g.node_count();
    // SSA in one block: always acyclic. Program order is a topological order too, so fall
    // back to index order if toposort ever reports a cycle.
    let order = toposort(g, None).unwrap_or_else(|_| g.node_indices().collect());
    let mut layer = vec![0usize; n];
    for v in order {
        for e in g.edges_directed(v, Direction::Outgoing) {
            let t = e.target().index();
            layer[t] = layer[t].max(layer[v.index()] + 1);
        }
    }
    let mut width = vec![NODE_W; n];
    let mut edges = Vec::new();
    let mut chains = Vec::new();
    for e in g.edge_references() {
        let (s, t) = (e.source().index(), e.target().index());
        let mut chain = vec![s];
        for l in layer[s] + 1..layer[t] {
            layer.push(l);
            width.push(DUMMY_W);
            chain.push(layer.len() - 1);
        }
        chain.push(t);
        for w in chain.windows(2) {
            edges.push((w[0], w[1]));
        }
        chains.push(chain);
    }
    let depth = layer.iter().max().map_or(0, |&l| l + 1);
    let mut layers = vec![Vec::new(); depth];
    for (v, &l) in layer.iter().enumerate() {
        layers[l].push(v);
    }
    Layered { layer, width, edges, chains, layers }
}

/// Inversions of `v` (merge sort): the crossings of edges sorted by their upper end.
fn inversions(v: &mut [usize]) -> usize {
    if v.len() < 2 {
        return 0;
    }
    let mid = v.len() / 2;
    let mut n = inversions(&mut v[..mid]) + inversions(&mut v[mid..]);
    let mut merged = Vec::with_capacity(v.len());
    let (mut i, mut j) = (0, mid);
    while i < mid && j < v.len() {
        if v[j] < v[i] {
            n += mid - i;
            merged.push(v[j]);
            j += 1;
        } else {
            merged.push(v[i]);
            i += 1;
        }
    }
    merged.extend_from_slice(&v[i..mid]);
    merged.extend_from_slice(&v[j..]);
    v.copy_from_slice(&merged);
    n
}

/// Edge crossings between adjacent layers for the vertex positions `pos` (index in its layer).
pub fn crossings(edges: &[(usize, usize)], layer: &[usize], pos: &[usize]) -> usize {
    let depth = layer.iter().max().map_or(0, |&l| l + 1);
    let mut by_layer: Vec<Vec<(usize, usize)>> = vec![Vec::new(); depth];
    for &(s, t) in edges {
        by_layer[layer[s]].push((pos[s], pos[t]));
    }
    by_layer
        .into_iter()
        .map(|mut es| {
            es.sort_unstable();
            let mut lower: Vec<usize> = es.iter().map(|e| e.1).collect();
            inversions(&mut lower)
        })
        .sum()
}

fn positions(layers: &[Vec<usize>], n: usize) -> Vec<usize> {
    let mut pos = vec![0; n];
    for l in layers {
        for (k, &v) in l.iter().enumerate() {
            pos[v] = k;
        }
    }
    pos
}

/// Lays out `g` (see the module documentation).
pub fn layout<N, E>(g: &DiGraph<N, E>) -> Drawing {
    let mut lg = layered(g);
    let n = lg.layer.len();
    let mut preds = vec![Vec::new(); n];
    let mut succs = vec![Vec::new(); n];
    for &(s, t) in &lg.edges {
        preds[t].push(s);
        succs[s].push(t);
    }
    let mut pos = positions(&lg.layers, n);
    let initial_crossings = crossings(&lg.edges, &lg.layer, &pos);
    let (mut best, mut best_layers) = (initial_crossings, lg.layers.clone());
    for sweep in 0..24 {
        let down = sweep % 2 == 0;
        let order: Vec<usize> = if down {
            (1..lg.layers.len()).collect()
        } else {
            (0..lg.layers.len().saturating_sub(1)).rev().collect()
        };
        for l in order {
            let nbrs = if down { &preds } else { &succs };
            let mut keyed: Vec<(f64, usize, usize)> = lg.layers[l]
                .iter()
                .map(|&v| {
                    let ns = &nbrs[v];
                    let key = if ns.is_empty() {
                        pos[v] as f64
                    } else {
                        ns.iter().map(|&u| pos[u] as f64).sum::<f64>() / ns.len() as f64
                    };
                    (key, pos[v], v)
                })
                .collect();
            keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            lg.layers[l] = keyed.into_iter().map(|k| k.2).collect();
            for (k, &v) in lg.layers[l].iter().enumerate() {
                pos[v] = k;
            }
        }
        let c = crossings(&lg.edges, &lg.layer, &pos);
        if c < best {
            best = c;
            best_layers = lg.layers.clone();
        }
    }
    lg.layers = best_layers;
    let pos = positions(&lg.layers, n);
    // Coordinates: packed left to right, then pulled towards neighbours without overlap.
    let mut x = vec![0.0f64; n];
    for l in &lg.layers {
        let mut at = 0.0;
        for &v in l {
            x[v] = at + lg.width[v] / 2.0;
            at += lg.width[v] + GAP;
        }
    }
    let nbrs: Vec<Vec<usize>> =
        (0..n).map(|v| preds[v].iter().chain(&succs[v]).copied().collect()).collect();
    for _ in 0..16 {
        for l in &lg.layers {
            let want: Vec<f64> = l
                .iter()
                .map(|&v| match nbrs[v].len() {
                    0 => x[v],
                    k => nbrs[v].iter().map(|&u| x[u]).sum::<f64>() / k as f64,
                })
                .collect();
            // Keep order and separation: the mean of a left-to-right pass (each vertex pushed
            // right of its left neighbour) and a right-to-left one (pushed left), which keeps a
            // group that wants one point centred on it.
            let sep = |k: usize| (lg.width[l[k]] + lg.width[l[k + 1]]) / 2.0 + GAP;
            let mut right = want.clone();
            for k in 1..l.len() {
                right[k] = right[k].max(right[k - 1] + sep(k - 1));
            }
            let mut left = want;
            for k in (0..l.len().saturating_sub(1)).rev() {
                left[k] = left[k].min(left[k + 1] - sep(k));
            }
            for (k, &v) in l.iter().enumerate() {
                x[v] = (right[k] + left[k]) / 2.0;
            }
        }
    }
    let min_x = (0..n).map(|v| x[v] - lg.width[v] / 2.0).fold(f64::INFINITY, f64::min);
    let shift = if min_x.is_finite() { MARGIN - min_x } else { MARGIN };
    let max_x = (0..n).map(|v| x[v] + lg.width[v] / 2.0 + shift).fold(0.0, f64::max);
    let y = |v: usize| MARGIN + NODE_H / 2.0 + lg.layer[v] as f64 * LAYER_H;
    let point = |v: usize| (x[v] + shift, y(v));
    let node_pos = (0..g.node_count()).map(point).collect();
    let edge_routes = lg.chains.iter().map(|c| c.iter().map(|&v| point(v)).collect()).collect();
    Drawing {
        node_pos,
        edge_routes,
        width: max_x + MARGIN,
        height: MARGIN * 2.0 + NODE_H + lg.layers.len().saturating_sub(1) as f64 * LAYER_H,
        crossings: crossings(&lg.edges, &lg.layer, &pos),
        initial_crossings,
    }
}

const STYLE: &str = ".node rect{stroke:#555;stroke-width:1;fill:#fff}\
.node.op rect{fill:#f4f4f4}.node.arg rect{fill:#fff;stroke-dasharray:3 2}\
.node.convert rect{fill:#fdd;stroke:#c00;stroke-width:2}\
.node.remap rect{fill:#dfd;stroke:#080;stroke-width:2}\
.node.assign rect{fill:#dde8ff;stroke:#36c}\
.node.fallback rect{fill:#ffe6c7;stroke:#d70;stroke-width:2}\
.node.ret rect{fill:#333}.node.ret text{fill:#fff}\
.node text{font-size:11px;text-anchor:middle}.node .v{fill:#555;font-size:10px}\
.edge{fill:none;stroke-width:1.6}.node{cursor:pointer}";

/// The colour of an edge: grey for row-major values, else one per distinct layout.
pub fn layout_colour(layouts: &[String], layout: Option<&str>) -> &'static str {
    match layout.and_then(|l| layouts.iter().position(|x| x == l)) {
        Some(k) => colour(k),
        None => "#9a9a9a",
    }
}

/// The distinct layouts on `g`'s edges, in first-seen order (the colour order).
pub fn edge_layouts(g: &DiGraph<Node, Edge>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in g.edge_weights() {
        if let Some(l) = &e.layout {
            if !out.contains(l) {
                out.push(l.clone());
            }
        }
    }
    out
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max - 1).collect();
        t.push('…');
        t
    }
}

/// The drawing as SVG. `tensor_id` gives the id of a value's detail panel (`data-t`), for the
/// page's script; nodes and edges of values without one get none.
pub fn graph_svg(
    g: &DiGraph<Node, Edge>,
    d: &Drawing,
    tensor_id: &dyn Fn(Value) -> Option<usize>,
) -> String {
    let layouts = edge_layouts(g);
    let mut svg = Svg::new(d.width, d.height);
    for e in g.edge_references() {
        let route = &d.edge_routes[e.id().index()];
        let w = e.weight();
        let mut path = String::new();
        // Leave the source's bottom, enter the target's top; smooth through the dummies.
        let pts: Vec<(f64, f64)> = route
            .iter()
            .enumerate()
            .map(|(k, &(x, y))| match k {
                0 => (x, y + NODE_H / 2.0),
                k if k + 1 == route.len() => (x, y - NODE_H / 2.0),
                _ => (x, y),
            })
            .collect();
        for (k, &(x, y)) in pts.iter().enumerate() {
            if k == 0 {
                path.push_str(&format!("M{} {}", num(x), num(y)));
            } else {
                let (px, py) = pts[k - 1];
                let my = (py + y) / 2.0;
                path.push_str(&format!(
                    "C{} {} {} {} {} {}",
                    num(px),
                    num(my),
                    num(x),
                    num(my),
                    num(x),
                    num(y)
                ));
            }
        }
        let data = tensor_id(w.handle).map_or(String::new(), |t| format!(r#" data-t="{t}""#));
        let attrs = format!(
            r#"class="edge" stroke="{}"{data}"#,
            layout_colour(&layouts, w.layout.as_deref())
        );
        let title = match &w.layout {
            Some(l) => format!("{} : {l}", w.value),
            None => format!("{} : row-major", w.value),
        };
        svg.path(&path, &attrs, Some(&title));
    }
    for v in g.node_indices() {
        let node = &g[v];
        let (x, y) = d.node_pos[v.index()];
        let data =
            node.handle.and_then(tensor_id).map_or(String::new(), |t| format!(r#" data-t="{t}""#));
        svg.raw(&format!(r#"<g class="node {}"{data}>"#, node.kind.class()));
        svg.rect(
            x - NODE_W / 2.0,
            y - NODE_H / 2.0,
            NODE_W,
            NODE_H,
            r#"rx="4""#,
            Some(&node.detail),
        );
        svg.text(x, y - 2.0, "", &truncate(&node.label, 22));
        svg.text(x, y + 11.0, r#"class="v""#, &truncate(&node.value, 24));
        svg.raw("</g>\n");
    }
    svg.finish(STYLE)
}
