//! Tests of the whole parser: every syntax form, error recovery and its exact messages, and
//! inputs built to break it (deep nesting, huge literals, junk, very long lines).

mod errors;
mod robustness;
mod sketch;
mod syntax;

use crate::ast::Module;
use crate::diag::{render_all, SourceFile};

/// Parses text that must be valid, with the diagnostics in the panic message otherwise.
fn ok(src: &str) -> Module {
    match crate::parse(src) {
        Ok(m) => m,
        Err(d) => panic!("unexpected errors:\n{}", render_all(&SourceFile::new("t.fbir", src), &d)),
    }
}

/// The rendered diagnostics of text that must be invalid.
fn errors(src: &str) -> String {
    match crate::parse(src) {
        Ok(m) => panic!("parsed, but should not have:\n{}", sketch::module(&m)),
        Err(d) => render_all(&SourceFile::new("t.fbir", src), &d),
    }
}

/// The sketch of the single op in `func.func @f() { OP }`.
fn op(text: &str) -> String {
    let m = ok(&format!("func.func @f() {{ {text} }}"));
    assert_eq!(m.funcs[0].body.len(), 1, "{text}");
    sketch::op(&m.funcs[0].body[0])
}

/// The sketch of attribute `k` in `x.y {k = TEXT}`.
fn attr(text: &str) -> String {
    let m = ok(&format!("func.func @f() {{ x.y {{k = {text}}} }}"));
    sketch::attr(&m.funcs[0].body[0].attrs[0].value)
}

#[test]
fn zz_sizes() {
    use crate::ast::*;
    eprintln!("Op {} Func {} Module {} NamedAttr {} Param {} Attr {} AttrKind {} Type {} TypeKind {} AffineMap {} FnType {} Loc {} Ident {} Arg {} Expr {} DExpr {} ER {}",
        size_of::<Op>(), size_of::<Func>(), size_of::<Module>(), size_of::<NamedAttr>(), size_of::<Param>(), size_of::<Attr>(), size_of::<AttrKind>(), size_of::<Type>(), size_of::<TypeKind>(), size_of::<AffineMap>(), size_of::<FnType>(), size_of::<Loc>(), size_of::<Ident>(), size_of::<Arg>(), size_of::<Expr>(), size_of::<crate::parser::DExpr>(), size_of::<lalrpop_util::ErrorRecovery<usize, crate::lexer::Tok, std::convert::Infallible>>());
}

#[test]
#[ignore]
fn zz_timing() {
    use std::fmt::Write as _;
    let ops = 200_000;
    let mut src = String::from("func.func @f(%v0: tensor<1x512x2048xf32>) {\n");
    for i in 1..=ops {
        let _ = writeln!(src, "    %v{i} = tensor.add %v{}, %v0 : (tensor<1x512x2048xf32>, tensor<1x512x2048xf32>) -> tensor<1x512x2048xf32>", i - 1);
    }
    src.push_str("}\n");
    for _ in 0..3 {
        let t = std::time::Instant::now();
        let d = std::cell::RefCell::new(Vec::new());
        let toks: Vec<_> = crate::lexer::Tokens::new(&src, &d, 10, 256).collect();
        let lex = t.elapsed();
        let t = std::time::Instant::now();
        let m = crate::parse(&src).unwrap();
        let parse = t.elapsed();
        let t = std::time::Instant::now();
        drop(m);
        let dropt = t.elapsed();
        eprintln!("tokens {} lex {:?} parse(all) {:?} drop {:?}", toks.len(), lex, parse, dropt);
    }
}
