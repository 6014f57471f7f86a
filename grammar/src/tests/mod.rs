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
