//! Copying a function's forward computation into the function autodiff builds, with every
//! `func.call` inlined.
//!
//! Autodiff differentiates through calls by inlining them (rather than generating `@callee_grad`
//! functions): the joint forward+backward graph is then one straight-line body, which is what the
//! FBLayout passes analyse (paper Sec. 3.1: one graph `G = (V, E)` with `E_reuse` edges between the
//! two passes), and a callee's activations become ordinary values that backward ops can reuse.
//! Copied ops keep their spans (and operand spans) so diagnostics about them still point at the
//! text they came from, and values keep their names so the printed IR reads like the source.

use std::collections::HashMap;

use fbc_dialects::kind::FuncOp;
use fbc_ir::{Attr, Diagnostic, FuncId, Module, Value};

use super::emit::{internal, BACKWARD, OPTIMIZER, REUSE};

const MARKS: &[&str] = &[BACKWARD, REUSE, OPTIMIZER];

/// Appends a copy of `src`'s body, without its `func.return`, to `dst`'s body; `args` are the
/// values `src`'s arguments stand for. Calls are inlined, recursively. Returns the copies of the
/// values `src` returns. `stack` holds the functions being inlined, to refuse recursion.
pub(crate) fn inline_body(
    m: &mut Module,
    src: FuncId,
    dst: FuncId,
    args: &[Value],
    stack: &mut Vec<FuncId>,
) -> Result<Vec<Value>, Diagnostic> {
    let f = m.func(src);
    let (name, span, body) = (f.name.clone(), f.name_span, f.body.clone());
    if f.args.len() != args.len() {
        return Err(internal(
            span,
            format!("@{name} takes {} arguments, got {}", f.args.len(), args.len()),
        ));
    }
    let mut map: HashMap<Value, Value> = f.args.iter().copied().zip(args.iter().copied()).collect();
    stack.push(src);
    for op in body {
        let d = m.op(op).clone();
        let operands = d
            .operands
            .iter()
            .map(|v| {
                map.get(v)
                    .copied()
                    .ok_or_else(|| internal(d.span, "operand used before its definition"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if d.def.traits.terminator {
            stack.pop();
            return Ok(operands);
        }
        if FuncOp::Call.is(&d) {
            let Some(Attr::Symbol(callee)) = d.attr("callee") else {
                return Err(internal(d.span, "func.call without a callee"));
            };
            let callee_id = m
                .find_func(callee)
                .ok_or_else(|| internal(d.span, format!("no function @{callee}")))?;
            if stack.contains(&callee_id) {
                return Err(Diagnostic::error(format!(
                    "cannot differentiate through the recursive call to @{callee}"
                ))
                .at(d.spans.as_ref().map_or(d.span, |s| s.name))
                .with_label("this call is reached again from inside @".to_string() + callee)
                .with_note("autodiff inlines calls, so the call graph must be acyclic"));
            }
            let returned = inline_body(m, callee_id, dst, &operands, stack)?;
            if returned.len() != d.results.len() {
                return Err(internal(
                    d.span,
                    format!("@{callee} returns {} values", returned.len()),
                ));
            }
            for (&r, v) in d.results.iter().zip(returned) {
                map.insert(r, v);
            }
            continue;
        }
        let types = d.results.iter().map(|&r| m.value_type(r).clone()).collect();
        // The roles marked in the source (if it was itself generated) are not this graph's.
        let attrs: Vec<_> =
            d.attrs.iter().filter(|(k, _)| !MARKS.contains(&k.as_str())).cloned().collect();
        let new = m.append_op(dst, d.def, &operands, attrs, types, d.span);
        m.op_mut(new).spans = d.spans.clone();
        m.op_mut(new).loc = d.loc.clone();
        let results = m.op(new).results.clone();
        for (&old, &copy) in d.results.iter().zip(&results) {
            if let Some(name) = m.value(old).name.clone() {
                m.set_value_name(copy, name);
            }
            map.insert(old, copy);
        }
    }
    Err(internal(span, format!("@{name} does not end with func.return")))
}
