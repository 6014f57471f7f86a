//! How far `fuse-attention` fuses without `max-queries`: a decode step's few queries on every
//! profile, a causal prompt's too where the profile's `[attention] fuse_prompts` is on (the
//! nvidia profile), never a long attention without a causal mask; `max-queries` overrides the
//! profile either way. The numbers stay the interpreter's.

mod common;

use common::*;

/// `@NAME`: attention of `s` queries over `s` keys (2 heads of 8), causal or not.
fn attention(name: &str, s: u64, causal: bool) -> String {
    let t = |a: u64, b: u64| format!("tensor<1x2x{a}x{b}xf32>");
    let (q, k, sc) = (t(s, 8), t(s, 8), t(s, s));
    let (pos, mask, scores) = if causal {
        (
            ", %pos: tensor<i32>".to_string(),
            format!(
                "  %mask = tensor.causal_mask %pos {{shape = [{s}, {s}]}} : (tensor<i32>) -> tensor<{s}x{s}xf32>
  %sm = tensor.add %ss, %mask : ({sc}, tensor<{s}x{s}xf32>) -> {sc}
"
            ),
            "%sm",
        )
    } else {
        (String::new(), String::new(), "%ss")
    };
    format!(
        "func.func @{name}(%q: {q}, %k: {k}, %v: {k}{pos}) -> {q} {{
  %s = tensor.matmul %q, %k {{transpose_b = true}} : ({q}, {k}) -> {sc}
  %ss = tensor.scale %s {{factor = 0.35}} : ({sc}) -> {sc}
{mask}  %p = tensor.softmax {scores} {{axis = -1}} : ({sc}) -> {sc}
  %o = tensor.matmul %p, %v : ({sc}, {k}) -> {q}
  func.return %o : {q}
}}
"
    )
}

/// The functions of `m` whose attention became one `tensor.attention`.
fn fused(m: &fbc_ir::Module) -> Vec<String> {
    let mut names = Vec::new();
    for f in m.func_ids() {
        let func = m.func(f);
        if func.body.iter().any(|&o| !m.op(o).erased && m.op(o).name() == "tensor.attention") {
            names.push(func.name.clone());
        }
    }
    names
}

#[test]
fn prompts_fuse_where_the_profile_says_and_only_when_causal() {
    let text = [
        attention("decode", 1, true),
        attention("prompt", 64, true),
        attention("encoder", 64, false),
    ]
    .concat();
    let original = parse(&text);
    for (target, pipeline, want) in [
        ("generic", "fuse-attention", &["decode"][..]),
        ("mali", "fuse-attention", &["decode"]),
        ("nvidia", "fuse-attention", &["decode", "prompt"]),
        ("nvidia", "fuse-attention{max-queries=16}", &["decode"]),
        ("generic", "fuse-attention{max-queries=64}", &["decode", "prompt", "encoder"]),
    ] {
        let mut m = original.clone();
        let stats = run(&mut m, pipeline, target);
        assert_eq!(fused(&m), want, "{target} {pipeline}");
        let counted = stats.get("fuse-attention", "fused");
        assert_eq!(counted, want.len() as i64, "{target} {pipeline}");
        same_numbers(&original, &m, &format!("{target} {pipeline}"));
    }
}
