//! The verifier: checks every invariant of a module and reports every violation.
//!
//! Checked, for each function and op:
//! - every op is registered (ops that failed to build are reported where they were built);
//! - operand and result counts match the op's declared arity;
//! - required attributes are present and every attribute has the declared kind; attributes the op
//!   does not declare are errors unless their name contains a `.` (MLIR's discardable attributes,
//!   such as `fbc.backward`);
//! - operands are defined before use in the same function (SSA dominance in a single block), and
//!   not used after an op that consumes them (`memory.dealloc`);
//! - every index map among its attributes is affine (`+ - * floordiv ceildiv mod`, the operators
//!   the text form spells; a pass that simplified a map into shifts writes it back with
//!   `IndexMap::to_affine`);
//! - the op's own verifier accepts it, and the result types it infers equal the declared ones;
//! - a function body ends with exactly one terminator (`func.return`), and nothing follows it.
//!
//! Ops reading a value of `Unknown` type are skipped: their operand's definition already failed.

use fbc_grammar::{Diagnostic, Span};

use crate::module::{Module, Op, ValueDef};
use crate::registry::{ErrorPlace, OpDef, OpError, OpView};

/// All verification errors of the module, in source order within each function.
pub fn verify_module(m: &Module) -> Vec<Diagnostic> {
    let mut diags = Vec::new();
    let mut defined = vec![false; m.values.len()];
    for fid in m.func_ids() {
        let f = m.func(fid);
        for &a in &f.args {
            defined[a.index()] = true;
        }
        let n = f.body.len();
        // Values whose lifetime an earlier op ended, with that op's span.
        let mut consumed: std::collections::HashMap<crate::module::Value, Span> =
            std::collections::HashMap::new();
        for (pos, &op) in f.body.iter().enumerate() {
            verify_op(m, op, &defined, &mut diags);
            let data = m.op(op);
            for (i, v) in data.operands.iter().enumerate() {
                if let Some(&end) = consumed.get(v) {
                    let name = m.value(*v).name.as_deref().unwrap_or("?");
                    diags.push(
                        Diagnostic::error(format!(
                            "%{name} is used after its lifetime ended (operand {i} of {})",
                            data.name()
                        ))
                        .at(data.operand_span(i))
                        .with_secondary(end, "its lifetime ends here"),
                    );
                }
            }
            if data.def.traits.consumes {
                for &v in &data.operands {
                    consumed.entry(v).or_insert(data.span);
                }
            }
            for &r in &data.results {
                defined[r.index()] = true;
            }
            if data.def.traits.terminator && pos + 1 != n {
                diags.push(
                    Diagnostic::error(format!(
                        "`{}` must be the last op of its function",
                        data.name()
                    ))
                    .at(data.span)
                    .with_label("ops follow this terminator"),
                );
            }
        }
        let ends_well = f.body.last().is_some_and(|&o| m.op(o).def.traits.terminator);
        if !ends_well {
            diags.push(
                Diagnostic::error(format!("function @{} does not end with func.return", f.name))
                    .at(f.name_span)
                    .with_label("every function body must end with `func.return`"),
            );
        }
    }
    diags
}

fn place_span(m: &Module, op: Op, place: &ErrorPlace) -> (Span, Option<String>) {
    let d = m.op(op);
    match place {
        ErrorPlace::Op => (d.spans.as_ref().map_or(d.span, |s| s.name), None),
        ErrorPlace::Operand(i) => {
            (d.operand_span(*i), Some(format!("operand {i} of {}", d.name())))
        }
        ErrorPlace::Result(i) => (d.result_span(*i), Some(format!("result {i} of {}", d.name()))),
        ErrorPlace::Attr(a) => (d.attr_span(a), Some(format!("attribute `{a}` of {}", d.name()))),
    }
}

/// Turns an op verifier error into a located diagnostic.
pub fn op_error_diagnostic(m: &Module, op: Op, e: OpError) -> Diagnostic {
    let (span, label) = place_span(m, op, &e.place);
    let mut d = Diagnostic::error(e.message).at(span);
    d.label = label;
    d.notes = e.notes;
    d
}

fn verify_op(m: &Module, op: Op, defined: &[bool], diags: &mut Vec<Diagnostic>) {
    let data = m.op(op);
    if data.erased {
        diags.push(
            Diagnostic::error(format!("erased op `{}` is still in a body", data.name()))
                .at(data.span),
        );
        return;
    }
    if data.def.name == "builtin.unresolved" {
        // Reported when it was built.
        return;
    }
    let def = data.def;
    let mut errs: Vec<OpError> = Vec::new();
    for (i, &v) in data.operands.iter().enumerate() {
        let vd = m.value(v);
        let same_func = match vd.def {
            ValueDef::Arg { func, .. } => func == data.func,
            ValueDef::Result { op: d, .. } => m.op(d).func == data.func,
        };
        if !same_func || !defined[v.index()] {
            let name = vd.name.as_deref().unwrap_or("?");
            errs.push(OpError::operand(i, format!("%{name} is used before it is defined")));
        }
    }
    errs.extend(check_generic(def, data.operands.len(), data.results.len(), &data.attrs));
    let operand_types: Vec<_> = data.operands.iter().map(|&v| m.value_type(v).clone()).collect();
    if errs.is_empty() && operand_types.iter().all(|t| !t.is_unknown()) {
        let view = OpView {
            module: m,
            op,
            operand_types: &operand_types,
            attrs: &data.attrs,
            func: data.func,
        };
        match (def.infer)(&view) {
            Err(e) => errs.push(e),
            Ok(inferred) => {
                if inferred.len() == data.results.len() {
                    for (i, (want, &r)) in inferred.iter().zip(&data.results).enumerate() {
                        let have = m.value_type(r);
                        if have != want && !have.is_unknown() {
                            errs.push(OpError {
                                message: format!("expected {want}, found {have}"),
                                place: ErrorPlace::Result(i),
                                notes: vec![format!(
                                    "the operands and attributes of `{}` give result {i} the type {want}",
                                    def.name
                                )],
                            });
                        }
                    }
                } else if def.results.accepts(data.results.len()) {
                    errs.push(OpError::new(format!(
                        "`{}` produces {} results here, found {}",
                        def.name,
                        inferred.len(),
                        data.results.len()
                    )));
                }
            }
        }
    }
    diags.extend(errs.into_iter().map(|e| op_error_diagnostic(m, op, e)));
}

/// The checks every op gets from its definition alone: operand and result counts, required
/// attributes, attribute kinds, undeclared attributes. Shared by the verifier and by the builder,
/// which must run them before asking an op to infer its result types.
pub fn check_generic(
    def: &OpDef,
    operands: usize,
    results: usize,
    attrs: &[(String, crate::attr::Attr)],
) -> Vec<OpError> {
    let mut errs = Vec::new();
    if !def.operands.accepts(operands) {
        errs.push(OpError::new(format!(
            "`{}` takes {} operands, found {operands}",
            def.name, def.operands
        )));
    }
    if !def.results.accepts(results) {
        errs.push(OpError::new(format!(
            "`{}` has {} results, found {results}",
            def.name, def.results
        )));
    }
    for a in def.attrs {
        match attrs.iter().find(|(k, _)| k == a.name).map(|(_, v)| v) {
            None if a.required => {
                errs.push(
                    OpError::new(format!("`{}` requires attribute `{}`", def.name, a.name))
                        .note(format!("`{}` is {}: {}", a.name, a.kind.describe(), a.doc)),
                );
            }
            Some(v) if !a.kind.accepts(v) => errs.push(OpError::attr(
                a.name,
                format!(
                    "`{}` must be {}, found {} `{v}`",
                    a.name,
                    a.kind.describe(),
                    v.kind_name()
                ),
            )),
            _ => {}
        }
    }
    for (k, v) in attrs {
        if let Some(op) = non_affine(v) {
            errs.push(OpError::attr(
                k,
                format!("index map `{k}` uses `{}`, which is not an affine operator", op.name()),
            ));
        }
        if !k.contains('.') && !def.attrs.iter().any(|a| a.name == k) {
            let known: Vec<&str> = def.attrs.iter().map(|a| a.name).collect();
            let note = if known.is_empty() {
                format!("`{}` takes no attributes", def.name)
            } else {
                format!("`{}` takes: {}", def.name, known.join(", "))
            };
            errs.push(
                OpError::attr(k, format!("unknown attribute `{k}` for `{}`", def.name)).note(note),
            );
        }
    }
    errs
}

/// The first operator that is not affine in an index map of `a` (or of an array in it).
fn non_affine(a: &crate::attr::Attr) -> Option<crate::attr::BinOp> {
    use crate::attr::Attr;
    match a {
        Attr::Map(m) => m.results.iter().find_map(fbc_index::Expr::non_affine_op),
        Attr::Array(items) => items.iter().find_map(non_affine),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use fbc_index::{BinOp, Expr, IndexMap};

    use super::check_generic;
    use crate::attr::Attr;

    fn map(e: Expr) -> Attr {
        Attr::Map(IndexMap { dims: vec!["d0".into()], symbols: vec![], results: vec![e] })
    }

    #[test]
    fn index_maps_in_attributes_must_be_affine() {
        let ret = crate::func::OPS.iter().find(|d| d.name == "func.return").expect("func.return");
        let d0 = || Expr::var("d0");
        let affine = map(Expr::binary(BinOp::Mod, d0(), Expr::Const(64)));
        assert!(check_generic(ret, 0, 0, &[("fbc.map".into(), affine)]).is_empty());
        let shift = map(Expr::binary(
            BinOp::Add,
            Expr::Const(1),
            Expr::binary(BinOp::Shr, d0(), Expr::Const(6)),
        ));
        let nested = Attr::Array(vec![map(-Expr::binary(BinOp::Min, d0(), Expr::Const(3)))]);
        let errs =
            check_generic(ret, 0, 0, &[("fbc.map".into(), shift), ("fbc.maps".into(), nested)]);
        let msgs: Vec<&str> = errs.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(
            msgs,
            [
                "index map `fbc.map` uses `>>`, which is not an affine operator",
                "index map `fbc.maps` uses `min`, which is not an affine operator"
            ]
        );
    }
}
