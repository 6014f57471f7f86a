//! Test helpers: build one-op functions from `.fbir` text and check the types the tensor dialect
//! infers, or the exact error it reports — through both paths that call an op's verifier (result
//! types inferred while building, and the verifier checking a written signature).

#![allow(dead_code)]

use std::sync::{Arc, OnceLock};

use fbc_ir::{Diagnostic, Module, OpRegistry, SourceFile};

pub fn registry() -> &'static OpRegistry {
    static R: OnceLock<OpRegistry> = OnceLock::new();
    R.get_or_init(fbc_dialects::registry)
}

/// A module with one function `@f(%a0: args[0], ...)` whose body is `body` then `func.return`.
pub fn module_text(args: &[&str], body: &str) -> String {
    let params: Vec<String> = args.iter().enumerate().map(|(i, t)| format!("%a{i}: {t}")).collect();
    format!(
        "module {{\n  func.func @f({}) {{\n    {body}\n    func.return\n  }}\n}}\n",
        params.join(", ")
    )
}

pub fn parse(text: &str) -> Result<Module, Vec<Diagnostic>> {
    fbc_ir::parse_module(&Arc::new(SourceFile::new("t.fbir", text)), registry())
}

fn results(n: usize) -> String {
    let names: Vec<String> = (0..n).map(|i| format!("%r{i}")).collect();
    names.join(", ")
}

fn render(diags: &[Diagnostic]) -> String {
    diags
        .iter()
        .map(|d| format!("{} [{:?}] {:?}", d.message, d.label, d.notes))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The result types inferred for `op` (written without a signature, e.g. `tensor.add %a0, %a1`)
/// with `n` results. Also checks that writing those types as the signature verifies.
pub fn infer_n(args: &[&str], op: &str, n: usize) -> Vec<String> {
    let text = module_text(args, &format!("{} = {op}", results(n)));
    let m = parse(&text).unwrap_or_else(|d| panic!("{text}\nfailed:\n{}", render(&d)));
    let f = &m.funcs[0];
    let o = m.op(f.body[0]);
    let types: Vec<String> = o.results.iter().map(|&r| m.value_type(r).to_string()).collect();
    // The same op with its signature written verifies too.
    let sig = format!(" : ({}) -> ({})", args.join(", "), types.join(", "));
    let text2 = module_text(args, &format!("{} = {op}{sig}", results(n)));
    if let Err(d) = parse(&text2) {
        panic!("{text2}\nfailed:\n{}", render(&d));
    }
    types
}

/// The single result type inferred for `op`.
pub fn infer(args: &[&str], op: &str) -> String {
    let mut t = infer_n(args, op, 1);
    assert_eq!(t.len(), 1);
    t.remove(0)
}

/// The one diagnostic of `text`, which must fail.
pub fn only_error(text: &str) -> Diagnostic {
    match parse(text) {
        Ok(_) => panic!("{text}\nverified, but an error was expected"),
        Err(mut d) => {
            assert_eq!(d.len(), 1, "{text}\nexpected one error, got:\n{}", render(&d));
            d.remove(0)
        }
    }
}

/// The error of `op` with its signature written (dummy result types), from the verifier.
pub fn verify_err_n(args: &[&str], op: &str, n: usize) -> Diagnostic {
    let dummies = vec!["tensor<1xf32>"; n];
    let sig = format!(" : ({}) -> ({})", args.join(", "), dummies.join(", "));
    only_error(&module_text(args, &format!("{} = {op}{sig}", results(n))))
}

/// Asserts that `op` (one result) fails with exactly `msg`, at `place` (the diagnostic's label:
/// `operand 1 of tensor.add`, `attribute `axis` of tensor.softmax`, or "op" for the op itself),
/// both when its result type is inferred and when its signature is written. Returns the
/// verifier's diagnostic, for checking notes.
pub fn assert_err(args: &[&str], op: &str, msg: &str, place: &str) -> Diagnostic {
    assert_err_n(args, op, 1, msg, place)
}

pub fn assert_err_n(args: &[&str], op: &str, n: usize, msg: &str, place: &str) -> Diagnostic {
    let d = verify_err_n(args, op, n);
    assert_eq!(d.message, msg, "verifier message of `{op}`");
    let want_label = (place != "op").then(|| place.to_string());
    assert_eq!(d.label, want_label, "verifier label of `{op}`");
    // Building without a signature runs the same checks. Count and attribute problems (the
    // generic checks) are reported by the verifier exactly as above; problems found while
    // inferring the result types are reported at the op, saying so.
    let text = module_text(args, &format!("{} = {op}", results(n)));
    let b = only_error(&text);
    if b.message == msg {
        assert_eq!(b.label, d.label, "builder label of `{op}`");
    } else {
        assert_eq!(
            b.message,
            format!("{msg} (and the result types cannot be inferred)"),
            "builder message of `{op}`"
        );
    }
    assert_eq!(b.notes, d.notes, "builder notes of `{op}`");
    d
}
