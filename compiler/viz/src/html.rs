//! `fbc viz`'s page: one self-contained HTML file (inline SVG, CSS and a short script; nothing
//! fetched) with, per function, the graph after the pipeline ([`crate::graph`]), and per
//! tensor a panel: its type and final layout, its placement ([`crate::placement`]), the Eq. 2
//! scores of every layout `rtile-select` weighed (the chosen one marked, the placements of the
//! three best rejected ones drawn), and for a `layout.remap` its index map before and after the
//! e-graph simplification with the div/mod counts.
//!
//! What it reads: the optimised module (layouts are attributes: `layout.assign`'s `layout`, an
//! op's `fbc.layout`, the function's `fbc.arg_layouts`, the candidates `fbc.rtile_candidates*`)
//! and the pipeline's records `rtile-select`, `global-layout` and `index-simplify`.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use fbc_dialects::kind::LayoutOp;
use fbc_dialects::layout::Layout;
use fbc_ir::{Attr, Module, Type, Value, ValueDef};
use serde_json::Value as Json;

use crate::graph::{self, edge_layouts, layout_colour, layout_of, value_name};
use crate::placement::{placement_svg, short_layout, Placement};
use crate::svg::{escape, PALETTE};

/// What the page shows.
#[derive(Debug)]
pub struct Page<'a> {
    /// The input file's name (the page title).
    pub title: &'a str,
    pub target: &'a str,
    pub module: &'a Module,
    /// The pipeline's records (`Statistics::records`).
    pub records: &'a BTreeMap<String, Json>,
    /// The profile's texture-cache block `[C_h, C_w]`, texels.
    pub cache_block: [u64; 2],
    /// Only this function (default: every function).
    pub func: Option<&'a str>,
    /// The tensor whose panel is shown first (default: the first).
    pub open: Option<Value>,
}

/// Elements per side of the window of a chosen layout's placement, and of a rejected one's.
const CHOSEN_SIDE: u64 = 32;
const REJECTED_SIDE: u64 = 16;
/// Rejected candidates drawn per tensor (the best scored).
const REJECTED_DRAWN: usize = 3;

/// Every layout attribute of the module, by its text: what the records name.
fn known_layouts(m: &Module) -> HashMap<String, Layout> {
    let mut out = HashMap::new();
    let mut add = |a: &Attr| {
        let list: Vec<&Attr> = match a {
            Attr::Array(xs) => xs.iter().collect(),
            other => vec![other],
        };
        for x in list {
            if let Ok(l) = Layout::from_attr(x) {
                out.insert(l.to_string(), l);
            }
        }
    };
    for f in &m.funcs {
        for (k, a) in &f.attrs {
            if k.starts_with("fbc.arg_layouts") || k.starts_with("fbc.rtile_candidates") {
                add(a);
            }
        }
    }
    for op in m.all_ops() {
        for (k, a) in &m.op(op).attrs {
            if matches!(k.as_str(), "layout" | "fbc.layout" | "from" | "to")
                || k.starts_with("fbc.rtile_candidates")
            {
                add(a);
            }
        }
    }
    out.insert(Layout::Linear.to_string(), Layout::Linear);
    out
}

/// The tensor a value's layout decision was made for: through `layout.assign`, its operand.
fn root_name(m: &Module, v: Value) -> String {
    if let ValueDef::Result { op, .. } = m.value(v).def {
        let d = m.op(op);
        if LayoutOp::Assign.is(d) {
            if let Some(&src) = d.operands.first() {
                return value_name(m, src);
            }
        }
    }
    value_name(m, v)
}

/// Placement SVGs, each distinct (shape, layout, window) drawn once and referenced by index.
#[derive(Default)]
struct Placements {
    svgs: Vec<String>,
    index: HashMap<(Vec<u64>, String, u64), usize>,
}

impl Placements {
    fn get(
        &mut self,
        name: &str,
        shape: &[u64],
        layout: &Layout,
        side: u64,
        cache: [u64; 2],
    ) -> Option<usize> {
        let key = (shape.to_vec(), layout.to_string(), side);
        if let Some(&k) = self.index.get(&key) {
            return Some(k);
        }
        let svg =
            placement_svg(&Placement { name, shape, layout, cache_block: cache, max_side: side })
                .ok()?;
        self.svgs.push(svg);
        self.index.insert(key, self.svgs.len() - 1);
        Some(self.svgs.len() - 1)
    }
}

fn fmt_score(v: &Json) -> String {
    v.as_f64().map_or_else(|| "-".into(), |x| format!("{x:.2}"))
}

/// The scores table of one selection record (`rtile-select`'s `selections[k]`); layouts in
/// short form, the attribute text on hover.
fn scores_table(sel: &Json, chosen_final: &str, layouts: &HashMap<String, Layout>) -> String {
    let mut s = String::from("<table class=\"scores\"><tr><th></th><th>layout</th><th>Eq. 2 total</th><th>per consumer (GFLOP/s × mem. eff. = perf)</th></tr>\n");
    let best = sel["chosen"].as_u64().unwrap_or(0) as usize;
    for (i, sc) in sel["scores"].as_array().into_iter().flatten().enumerate() {
        let layout = sc["layout"].as_str().unwrap_or("?");
        let mark = match (i == best, layout == chosen_final) {
            (true, true) => "selected",
            (true, false) => "Eq. 2 best",
            (false, true) => "final",
            (false, false) => "",
        };
        let per: Vec<String> = sc["per_consumer"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                if c.is_null() {
                    "-".into()
                } else {
                    format!(
                        "{} × {} = {}",
                        fmt_score(&c["gflops"]),
                        c["mem_eff"],
                        fmt_score(&c["perf"])
                    )
                }
            })
            .collect();
        let _ = writeln!(
            s,
            "<tr class=\"{}\"><td>{mark}</td><td title=\"{}\">{}</td><td>{}</td><td>{}</td></tr>",
            if mark.is_empty() { "rejected" } else { "chosen" },
            escape(layout),
            escape(&layouts.get(layout).map_or_else(|| layout.to_string(), short_layout)),
            fmt_score(&sc["total"]),
            escape(&per.join("; "))
        );
    }
    s.push_str("</table>\n");
    s
}

const STYLE: &str = "body{font-family:sans-serif;margin:0;display:flex;height:100vh}\
#main{flex:1;overflow:auto;padding:8px}#panel{width:44%;overflow:auto;border-left:1px solid #ccc;padding:8px}\
h1{font-size:18px}h2{font-size:15px}code{font-size:11px;word-break:break-all}\
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ddd;padding:2px 4px;vertical-align:top}\
tr.chosen{background:#eef7ee}.slot svg{max-width:100%;height:auto}.legend span{display:inline-block;width:14px;height:10px;margin:0 4px 0 10px}\
.tensor{display:none}.tensor.shown{display:block}.pl{display:none}\
.summary td{border:none}";

/// A short script: a click on a node or an edge shows its tensor's panel; placements are kept
/// once in the page and copied into a panel when it is first shown.
const SCRIPT: &str = r#"
function show(t){
  document.querySelectorAll('.tensor.shown').forEach(e=>e.classList.remove('shown'));
  var p=document.getElementById('t'+t); if(!p) return;
  p.querySelectorAll('[data-p]').forEach(function(slot){
    if(!slot.firstChild){ var from=document.getElementById('p'+slot.dataset.p); if(from) slot.innerHTML=from.innerHTML; }
  });
  p.classList.add('shown');
}
document.querySelectorAll('[data-t]').forEach(function(e){
  e.addEventListener('click', function(ev){ ev.stopPropagation(); show(e.dataset.t); });
});
var first=document.querySelector('.tensor'); var open=document.body.dataset.open;
if(open!==undefined) show(open); else if(first) show(first.id.slice(1));
"#;

/// The page (see the module documentation). `Err` names a function that is not there.
pub fn page_html(p: &Page<'_>) -> Result<String, String> {
    let m = p.module;
    let funcs: Vec<_> = match p.func {
        Some(name) => {
            vec![m.find_func(name).ok_or_else(|| format!("no function @{name} in the module"))?]
        }
        None => m.func_ids().collect(),
    };
    let layouts = known_layouts(m);
    let select = p.records.get("rtile-select");
    // Records name values, not functions: a name two functions share shows the first's.
    let mut selection_of: HashMap<String, &Json> = HashMap::new();
    let selections: Vec<(String, &Json)> = select
        .and_then(|r| r["tensors"].as_array())
        .into_iter()
        .flatten()
        .filter_map(|t| {
            let k = t["selection"].as_u64()? as usize;
            let sel = select?["selections"].get(k)?;
            Some((t["tensor"].as_str()?.to_string(), sel))
        })
        .collect();
    for (name, sel) in selections {
        selection_of.entry(name).or_insert(sel);
    }
    let remap_list: Vec<&Json> = p
        .records
        .get("index-simplify")
        .and_then(|r| r["remaps"].as_array())
        .into_iter()
        .flatten()
        .collect();
    // Records name values, not functions: a name two functions share shows the first's.
    let mut remaps: HashMap<String, &Json> = HashMap::new();
    for r in &remap_list {
        if let Some(name) = r["result"].as_str() {
            remaps.entry(name.to_string()).or_insert(r);
        }
    }
    // Panels: one per tensor value of the drawn functions.
    let mut values: Vec<Value> = Vec::new();
    for &f in &funcs {
        values.extend(m.func(f).args.iter().copied());
        for &op in &m.func(f).body {
            if !m.op(op).erased {
                values.extend(m.op(op).results.iter().copied());
            }
        }
    }
    values.retain(|&v| matches!(m.value_type(v), Type::Tensor(_)));
    let id_of: HashMap<Value, usize> = values.iter().enumerate().map(|(k, &v)| (v, k)).collect();
    let mut placements = Placements::default();
    let mut panels = String::new();
    for (k, &v) in values.iter().enumerate() {
        let name = value_name(m, v);
        let Type::Tensor(t) = m.value_type(v) else { continue };
        let shape: Vec<u64> = t.shape.to_vec();
        let final_layout = layout_of(m, v);
        let _ = writeln!(
            panels,
            "<div class=\"tensor\" id=\"t{k}\"><h2>{}</h2>",
            escape(&format!("{name} : {}", m.value_type(v)))
        );
        let _ =
            writeln!(panels, "<p>layout <code>{}</code></p>", escape(&final_layout.to_string()));
        if let Some(pk) = placements.get(&name, &shape, &final_layout, CHOSEN_SIDE, p.cache_block) {
            let _ = writeln!(panels, "<div class=\"slot\" data-p=\"{pk}\"></div>");
        }
        if let Some(sel) = selection_of.get(&root_name(m, v)) {
            let _ =
                writeln!(panels, "<h2>rtile-select (Eq. 2) for {}</h2>", escape(&root_name(m, v)));
            for c in sel["consumers"].as_array().into_iter().flatten() {
                let _ =
                    writeln!(panels, "<div>consumer: {}</div>", escape(c.as_str().unwrap_or("?")));
            }
            panels.push_str(&scores_table(sel, &final_layout.to_string(), &layouts));
            let mut rejected: Vec<(f64, &str)> = sel["scores"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| Some((s["total"].as_f64()?, s["layout"].as_str()?)))
                .filter(|(_, l)| *l != final_layout.to_string())
                .collect();
            rejected.sort_by(|a, b| b.0.total_cmp(&a.0));
            for (score, l) in rejected.into_iter().take(REJECTED_DRAWN) {
                let Some(layout) = layouts.get(l) else { continue };
                if let Some(pk) =
                    placements.get(&name, &shape, layout, REJECTED_SIDE, p.cache_block)
                {
                    let _ = writeln!(panels, "<h3>rejected, Eq. 2 total {score:.2}</h3><div class=\"slot\" data-p=\"{pk}\"></div>");
                }
            }
        }
        if let Some(r) = remaps.get(&name) {
            let _ = writeln!(
                panels,
                "<h2>layout.remap index map</h2><table><tr><th>before index-simplify</th><td><code>{}</code></td><td>{} div/mod</td></tr><tr><th>after</th><td><code>{}</code></td><td>{} div/mod</td></tr></table>",
                escape(r["before"].as_str().unwrap_or("?")),
                r["divmod_before"],
                escape(r["after"].as_str().unwrap_or("?")),
                r["divmod_after"]
            );
        }
        if let ValueDef::Result { op, .. } = m.value(v).def {
            let d = m.op(op);
            if LayoutOp::Convert.is(d) {
                let side = |k: &str| d.attr(k).map(|a| a.to_string()).unwrap_or_default();
                let _ = writeln!(panels, "<h2>layout.convert</h2><p>a copy kernel from <code>{}</code> (the producer's layout) to <code>{}</code> (the layout its readers take)</p>", escape(&side("from")), escape(&side("to")));
            }
            if let Some(why) = d.attr("fbc.tile_fallback").and_then(Attr::as_str) {
                let _ = writeln!(panels, "<h2>fallback</h2><p>left as a copy: {}</p>", escape(why));
            }
        }
        panels.push_str("</div>\n");
    }
    let mut body = String::new();
    let count = |f: &dyn Fn(&fbc_ir::OpData) -> bool| m.all_ops().filter(|&o| f(m.op(o))).count();
    let converts = count(&|d| LayoutOp::Convert.is(d));
    let remap_ops = count(&|d| LayoutOp::Remap.is(d));
    let fallbacks = count(&|d| d.attr("fbc.tile_fallback").is_some());
    let strategy =
        p.records.get("global-layout").and_then(|r| r["strategy"].as_str()).unwrap_or("-");
    let (db, da) = remap_list.iter().fold((0, 0), |(b, a), r| {
        (b + r["divmod_before"].as_u64().unwrap_or(0), a + r["divmod_after"].as_u64().unwrap_or(0))
    });
    let _ = writeln!(
        body,
        "<h1>{}</h1><table class=\"summary\"><tr><td>target {}</td><td>strategy {}</td><td>{} ops</td><td>{} layout.convert</td><td>{} layout.remap</td><td>{} fallbacks</td><td>div/mod {} before, {} after index-simplify</td></tr></table>",
        escape(p.title), escape(p.target), escape(strategy), m.num_ops(), converts, remap_ops, fallbacks, db, da
    );
    for &f in &funcs {
        let g = graph::op_graph(m, f);
        let d = graph::layout(&g);
        let legend = edge_layouts(&g);
        // A training step carries dozens of layouts: the legend folds, and says when the
        // palette's colours repeat.
        let repeat = if legend.len() > PALETTE.len() {
            format!(", colours repeat after {}", PALETTE.len())
        } else {
            String::new()
        };
        let _ = writeln!(
            body,
            "<h2>@{} ({} nodes, {} edge crossings)</h2><div class=\"legend\">nodes: red conversion, green remap, blue assign, orange copy left by a fallback<details><summary>edges: grey row-major and {} R-Tile layout(s){repeat}</summary><span style=\"background:#9a9a9a\"></span>row-major",
            escape(&m.func(f).name),
            g.node_count(),
            d.crossings,
            legend.len()
        );
        for l in &legend {
            let short = layouts.get(l).map_or_else(|| l.clone(), short_layout);
            let _ = write!(
                body,
                "<span style=\"background:{}\"></span><code title=\"{}\">{}</code>",
                layout_colour(&legend, Some(l)),
                escape(l),
                escape(&short)
            );
        }
        body.push_str("</details></div>\n");
        body.push_str(&graph::graph_svg(&g, &d, &|v| id_of.get(&v).copied()));
    }
    let open = p
        .open
        .and_then(|v| values.iter().position(|&x| x == v))
        .map_or(String::new(), |k| format!(" data-open=\"{k}\""));
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>fbc viz: {}</title><style>{STYLE}</style></head>\n<body{open}><div id=\"main\">{body}</div><div id=\"panel\">{panels}</div>\n",
        escape(p.title)
    );
    for (k, svg) in placements.svgs.iter().enumerate() {
        let _ = writeln!(out, "<div class=\"pl\" id=\"p{k}\">{svg}</div>");
    }
    let _ = write!(out, "<script>{SCRIPT}</script>\n</body></html>\n");
    Ok(out)
}
