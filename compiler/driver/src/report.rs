//! `--emit report`: a JSON summary of what the pipeline did to the graph.
//!
//! ```json
//! {"target": "mali", "ops": 41,
//!  "transforms": {"total": 12, "eliminated": 12, "folded": 0, "fallback": 0},
//!  "layout_converts": 0, "divmod": {"before": 24, "after": 0},
//!  "tensors": [{"name": "wq", "layout": "#layout.rtile<...>"}],
//!  "passes": [{"name": "canonicalize", "ms": 0.41}]}
//! ```
//!
//! Where each figure comes from, which is the contract with the passes:
//! - `transforms.total`: `tensor.reshape` and `tensor.transpose` ops of the input graph, counted
//!   before any pass runs;
//! - `transforms.eliminated` / `fallback`: the `index-elim` pass's statistics `eliminated` (became
//!   one `layout.remap` index map) and `fallback` (left as copies; 0 when it did not run);
//! - `transforms.folded`: removed by other passes before `index-elim` saw them (`canonicalize`
//!   folding `transpose∘transpose` or `reshape∘reshape`, `cse` merging duplicates, `dce`):
//!   `total − eliminated −` the reshape/transpose ops of the final graph;
//! - `layout_converts`: `layout.convert` ops in the final graph;
//! - `divmod.before` / `after`: the `index-simplify` pass's statistics `divmod-before` and
//!   `divmod-after`;
//! - `tensors`: every function argument and op result that carries a layout: results of
//!   `layout.assign` (its `layout` attribute) and values whose producer has an `fbc.layout`
//!   attribute (arguments: the function attribute `fbc.arg_layouts`, an array by argument index);
//! - `model`: the modelled time of the layout plan, summed over functions, from `global-layout`'s
//!   record (`compute_us`: FTD-D kernels under the analytic model, `convert_us`: explicit
//!   conversions, `copy_us`: reshapes/transposes left as copies, `total_us`); `null` when
//!   `global-layout` did not run. These are model figures, not measurements;
//! - `strategy`: the layout strategy (`fblayout`, `reuse`, `convert`), from the same record;
//! - `passes`: wall time of each pass, in pipeline order.

use std::fmt::Write as _;

use fbc_dialects::kind::{LayoutOp, TensorOp};
use fbc_ir::pass::{Statistics, Timings};
use fbc_ir::{Attr, Module};
use serde_json::{json, Value};

/// Counts the layout-transformation ops of a graph (`transforms.total`).
pub fn count_transforms(m: &Module) -> usize {
    m.all_ops()
        .filter(|&o| {
            matches!(TensorOp::of(m.op(o).def), Some(TensorOp::Reshape | TensorOp::Transpose))
        })
        .count()
}

fn value_name(m: &Module, v: fbc_ir::Value) -> String {
    m.value(v).name.as_deref().map_or_else(|| format!("%{}", v.0), str::to_string)
}

fn tensors(m: &Module) -> Vec<Value> {
    let mut out = Vec::new();
    for f in &m.funcs {
        if let Some(Attr::Array(layouts)) = f.attr("fbc.arg_layouts") {
            for (&a, l) in f.args.iter().zip(layouts) {
                // Arguments stored linearly need no conversion at the boundary.
                let linear = fbc_dialects::layout::Layout::from_attr(l)
                    .is_ok_and(|l| matches!(l, fbc_dialects::layout::Layout::Linear));
                if !matches!(l, Attr::Unit) && !linear {
                    out.push(json!({"name": value_name(m, a), "layout": l.to_string()}));
                }
            }
        }
        for &op in &f.body {
            let d = m.op(op);
            let layout =
                if LayoutOp::Assign.is(d) { d.attr("layout") } else { d.attr("fbc.layout") };
            if let (Some(l), Some(&r)) = (layout, d.results.first()) {
                out.push(json!({"name": value_name(m, r), "layout": l.to_string()}));
            }
        }
    }
    out
}

/// Builds the report of a compiled module.
pub fn build(
    target: &str,
    m: &Module,
    transforms_total: usize,
    stats: &Statistics,
    timings: &Timings,
) -> Value {
    let converts = m.all_ops().filter(|&o| LayoutOp::Convert.is(m.op(o))).count();
    let eliminated = stats.get("index-elim", "eliminated");
    let remaining = i64::try_from(count_transforms(m)).unwrap_or(i64::MAX);
    let total = i64::try_from(transforms_total).unwrap_or(i64::MAX);
    let folded = (total - eliminated - remaining).max(0);
    let gl = stats.records.get("global-layout");
    let model = gl.and_then(|r| r["functions"].as_array()).map(|funcs| {
        let sum = |k: &str| funcs.iter().filter_map(|f| f[k].as_f64()).sum::<f64>();
        // `+ 0.0` turns a rounded -0.0 into 0.0.
        let r3 = |x: f64| (x * 1e3).round() / 1e3 + 0.0;
        json!({
            "compute_us": r3(sum("compute_us")),
            "convert_us": r3(sum("convert_us")),
            "copy_us": r3(sum("copy_us")),
            "total_us": r3(sum("total_us")),
        })
    });
    json!({
        "target": target,
        "ops": m.num_ops(),
        "transforms": {
            "total": transforms_total,
            "eliminated": eliminated,
            "folded": folded,
            "fallback": stats.get("index-elim", "fallback"),
        },
        "layout_converts": converts,
        "divmod": {
            "before": stats.get("index-simplify", "divmod-before"),
            "after": stats.get("index-simplify", "divmod-after"),
        },
        "tensors": tensors(m),
        "strategy": gl.map_or(Value::Null, |r| r["strategy"].clone()),
        "model": model,
        "passes": timings.passes.iter().map(|(name, d)| json!({
            "name": name,
            "ms": (d.as_secs_f64() * 1e6).round() / 1e3,
        })).collect::<Vec<_>>(),
    })
}

/// The readable table `-v` prints.
pub fn summary(report: &Value) -> String {
    let mut s = String::new();
    let t = &report["transforms"];
    let _ = writeln!(s, "target            {}", report["target"].as_str().unwrap_or("?"));
    let _ = writeln!(s, "ops               {}", report["ops"]);
    let _ = writeln!(
        s,
        "transforms        {} total, {} eliminated, {} folded, {} fallback",
        t["total"], t["eliminated"], t["folded"], t["fallback"]
    );
    let _ = writeln!(s, "layout converts   {}", report["layout_converts"]);
    if let Some(model) = report["model"].as_object() {
        let _ = writeln!(
            s,
            "modelled time     {} us ({} compute, {} conversions, {} copies; strategy {})",
            model["total_us"],
            model["compute_us"],
            model["convert_us"],
            model["copy_us"],
            report["strategy"].as_str().unwrap_or("?")
        );
    }
    let _ = writeln!(
        s,
        "div/mod           {} before, {} after",
        report["divmod"]["before"], report["divmod"]["after"]
    );
    if let Some(tensors) = report["tensors"].as_array() {
        let _ = writeln!(s, "tensors with a layout: {}", tensors.len());
        for t in tensors {
            let _ = writeln!(
                s,
                "  {:<24} {}",
                t["name"].as_str().unwrap_or("?"),
                t["layout"].as_str().unwrap_or("?")
            );
        }
    }
    if let Some(passes) = report["passes"].as_array() {
        let _ = writeln!(s, "passes:");
        for p in passes {
            let _ = writeln!(
                s,
                "  {:<32} {:>9.3} ms",
                p["name"].as_str().unwrap_or("?"),
                p["ms"].as_f64().unwrap_or(0.0)
            );
        }
    }
    s
}
