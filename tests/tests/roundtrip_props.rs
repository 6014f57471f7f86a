//! Property: every valid module prints to a form that parses back to the same print.
//!
//! Modules are generated as text from random op sequences over a few shapes (elementwise, scale,
//! transpose, reshape, reductions, matmul, calls), with random discardable attributes of every
//! kind (strings with escapes, extreme floats, nested arrays, index maps), so printer escaping,
//! float formatting and map printing are exercised together.

use std::sync::Arc;

use fbc_ir::SourceFile;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Step {
    Unary(&'static str),
    Binary(&'static str, usize),
    Scale(f64),
    Transpose,
    Reshape,
    Reduce(bool),
    Matmul,
    Attr(usize, String, f64, i64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        prop::sample::select(vec![
            "tensor.neg",
            "tensor.exp",
            "tensor.relu",
            "tensor.tanh",
            "tensor.silu"
        ])
        .prop_map(Step::Unary),
        (
            prop::sample::select(vec!["tensor.add", "tensor.sub", "tensor.mul", "tensor.max"]),
            0usize..8
        )
            .prop_map(|(o, i)| Step::Binary(o, i)),
        prop_oneof![
            any::<f64>().prop_filter("finite", |f| f.is_finite()),
            Just(-0.0),
            Just(1e-300),
            Just(5e-324)
        ]
        .prop_map(Step::Scale),
        Just(Step::Transpose),
        Just(Step::Reshape),
        any::<bool>().prop_map(Step::Reduce),
        Just(Step::Matmul),
        (
            0usize..3,
            "[ -~\t\n\\\\\"é]{0,12}",
            any::<f64>().prop_filter("finite", |f| f.is_finite()),
            any::<i64>()
        )
            .prop_map(|(k, s, f, i)| Step::Attr(k, s, f, i)),
    ]
}

fn escape(s: &str) -> String {
    let mut o = String::new();
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\t' => o.push_str("\\t"),
            c => o.push(c),
        }
    }
    o
}

fn float(f: f64) -> String {
    let mut s = String::new();
    fbc_ir::attr::write_float(&mut s, f).unwrap();
    s
}

/// Builds a module over a 4x4 argument; every value keeps shape 4x4 (transposes and reshapes
/// round-trip through other shapes) so binary ops can combine any earlier values.
fn module(steps: &[Step]) -> String {
    let t = "tensor<4x4xf32>";
    let mut body = String::new();
    let mut vals = vec!["x".to_string()];
    for (i, s) in steps.iter().enumerate() {
        let last = vals.last().unwrap().clone();
        let v = format!("v{i}");
        let line = match s {
            Step::Unary(op) => format!("%{v} = {op} %{last} : ({t}) -> {t}"),
            Step::Binary(op, j) => {
                let other = &vals[j % vals.len()];
                format!("%{v} = {op} %{last}, %{other} : ({t}, {t}) -> {t}")
            }
            Step::Scale(f) => format!("%{v} = tensor.scale %{last} {{factor = {}}} : ({t}) -> {t}", float(*f)),
            Step::Transpose => format!("%{v} = tensor.transpose %{last} {{perm = [1, 0]}} : ({t}) -> {t}"),
            Step::Reshape => format!(
                "%{v}_flat = tensor.reshape %{last} {{shape = [16]}} : ({t}) -> tensor<16xf32>\n    \
                 %{v} = tensor.reshape %{v}_flat {{shape = [4, 4]}} : (tensor<16xf32>) -> {t}"
            ),
            Step::Reduce(keep) => format!(
                "%{v}_r = tensor.reduce_sum %{last} {{axes = [-1], keepdim = {keep}}}\n    \
                 %{v} = tensor.add %{last}, %{v}_r"
            ),
            Step::Matmul => format!("%{v} = tensor.matmul %{last}, %{last} {{transpose_b = true}} : ({t}, {t}) -> {t}"),
            Step::Attr(k, s, f, n) => {
                let attr = match k {
                    0 => format!("fbc.s = \"{}\", fbc.n = {n}", escape(s)),
                    1 => format!("fbc.f = {}, fbc.a = [{n}, [{}], \"{}\"]", float(*f), float(-*f), escape(s)),
                    _ => format!("fbc.m = (d0, d1) -> (d0 floordiv 4 + {}, d1 mod {} - d0 * 3)", n.rem_euclid(97), n.rem_euclid(64) + 1),
                };
                format!("%{v} = tensor.neg %{last} {{{attr}}} : ({t}) -> {t}")
            }
        };
        body.push_str("    ");
        body.push_str(&line);
        body.push('\n');
        vals.push(v);
    }
    let last = vals.last().unwrap();
    format!(
        "module @p {{\n  func.func @id(%a: {t}) -> {t} {{\n    func.return %a : {t}\n  }}\n\n  \
         func.func @main(%x: {t}) -> {t} {{\n{body}    %out = func.call %{last} {{callee = @id}} : ({t}) -> {t}\n    \
         func.return %out : {t}\n  }}\n}}\n"
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn printing_is_a_fixpoint(steps in prop::collection::vec(step(), 0..24)) {
        let driver = fbc::Driver::default();
        let text = module(&steps);
        let file = Arc::new(SourceFile::new("p.fbir", text.clone()));
        let m = fbc_ir::parse_module(&file, &driver.ops)
            .map_err(|d| fbc_grammar::diag::render_all(&file, &d))
            .unwrap_or_else(|e| panic!("generated module does not verify:\n{e}\n{text}"));
        let printed = fbc_ir::print_module(&m);
        let file2 = Arc::new(SourceFile::new("p2.fbir", printed.clone()));
        let m2 = fbc_ir::parse_module(&file2, &driver.ops)
            .map_err(|d| fbc_grammar::diag::render_all(&file2, &d))
            .unwrap_or_else(|e| panic!("printed module does not parse:\n{e}\n{printed}"));
        prop_assert_eq!(fbc_ir::print_module(&m2), printed);
        prop_assert_eq!(m2.num_ops(), m.num_ops());
    }
}
