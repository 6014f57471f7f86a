//! Building the joint forward+backward body (paper Sec. 3.1: `V = V_fwd ∪ V_bwd`).
//!
//! 1. The forward function is copied into the new function with calls inlined ([`inline_body`]).
//! 2. Activity analysis: a value is *varied* when it is a float tensor that depends on a
//!    differentiated argument, *useful* when the loss depends on it, and *active* when both. Only
//!    ops with an active result are differentiated, so frozen arguments (those not in `wrt`) and
//!    integer paths (ids, labels) get no gradient code at all, and every op that does need a rule
//!    is checked before anything is built.
//! 3. The reverse sweep walks the forward ops backwards from the seed `d(loss) = 1`, applying each
//!    op's rule ([`rules::apply`]) and summing the gradients of values with several uses with
//!    `tensor.add`.

use std::collections::HashMap;

use fbc_dialects::kind::TensorOp as T;
use fbc_ir::{Diagnostic, FuncId, Module, Op, OpRegistry, Type, Value};

use super::emit::{Emitter, BACKWARD};
use super::inline::inline_body;
use super::rules;

/// What [`build_joint`] produced in the new function.
#[derive(Debug)]
pub(crate) struct Joint {
    /// The copies of the forward function's results.
    pub results: Vec<Value>,
    /// The gradient of result 0 with respect to each `wrt` argument, in order.
    pub grads: Vec<Value>,
}

/// Which values carry derivatives (indexed by value; values made later are inactive).
struct Activity {
    varied: Vec<bool>,
    useful: Vec<bool>,
}

fn is_float_tensor(m: &Module, v: Value) -> bool {
    matches!(m.value_type(v), Type::Tensor(t) if t.elem.is_float())
}

impl Activity {
    fn new(m: &Module, body: &[Op], seeds: &[Value], loss: Value) -> Activity {
        let n = m.values.len();
        let mut varied = vec![false; n];
        let mut useful = vec![false; n];
        for &s in seeds {
            varied[s.index()] = is_float_tensor(m, s);
        }
        for &op in body {
            let d = m.op(op);
            if d.operands.iter().any(|v| varied[v.index()]) {
                for &r in &d.results {
                    varied[r.index()] = is_float_tensor(m, r);
                }
            }
        }
        useful[loss.index()] = true;
        for &op in body.iter().rev() {
            let d = m.op(op);
            if d.results.iter().any(|r| useful[r.index()]) {
                for v in &d.operands {
                    useful[v.index()] = true;
                }
            }
        }
        Activity { varied, useful }
    }

    fn active(&self, v: Value) -> bool {
        let i = v.index();
        self.varied.get(i).copied().unwrap_or(false) && self.useful.get(i).copied().unwrap_or(false)
    }

    fn op_active(&self, m: &Module, op: Op) -> bool {
        m.op(op).results.iter().any(|&r| self.active(r))
    }
}

/// Appends to `dst` (whose first arguments stand for `src`'s) the forward computation of `src`
/// and the backward computation of the gradients of `src`'s result 0 with respect to the
/// arguments `wrt` (indices). Does not add a `func.return`.
pub(crate) fn build_joint(
    m: &mut Module,
    reg: &OpRegistry,
    src: FuncId,
    dst: FuncId,
    wrt: &[usize],
) -> Result<Joint, Vec<Diagnostic>> {
    let n = m.func(src).args.len();
    let args: Vec<Value> = m.func(dst).args.iter().take(n).copied().collect();
    let src_name = m.func(src).name.clone();
    let ret_span = m.func(src).body.last().map_or(m.func(src).name_span, |&r| m.op(r).span);
    let results = inline_body(m, src, dst, &args, &mut Vec::new()).map_err(|d| vec![d])?;
    let Some(&loss) = results.first() else {
        return Err(vec![super::emit::internal(ret_span, "the function returns nothing")]);
    };
    let body = m.func(dst).body.clone();
    let seeds: Vec<Value> = wrt.iter().filter_map(|&i| args.get(i).copied()).collect();
    let act = Activity::new(m, &body, &seeds, loss);

    let errors: Vec<Diagnostic> = body
        .iter()
        .filter(|&&op| act.op_active(m, op) && !rules::has_rule(m.op(op).def))
        .map(|&op| {
            let d = m.op(op);
            Diagnostic::error(format!(
                "cannot differentiate `{}`: it has no gradient rule",
                d.name()
            ))
            .at(d.spans.as_ref().map_or(d.span, |s| s.name))
            .with_label(format!(
                "on the path from a differentiated argument to the loss of @{src_name}"
            ))
            .with_note(if fbc_dialects::kind::TensorOp::Dequantize.is(d) {
                "quantised weights are frozen: `tensor.dequantize` has no gradient with respect \
                 to its packed values or its scales; leave them out of `wrt` (train an f32 \
                 weight, or an adapter added to the dequantised one)"
            } else {
                "the loss depends on this op's result, and the result depends on an argument \
                     listed in `wrt`; leave that argument out of `wrt`, or compute the value with \
                     ops autodiff can differentiate"
            })
        })
        .collect();
    if !errors.is_empty() {
        return Err(errors);
    }

    let mut e = Emitter::new(reg, dst, ret_span, BACKWARD);
    let mut grads: HashMap<Value, Value> = HashMap::new();
    if act.active(loss) {
        let seed = e.constant(m, 1.0, m.value_type(loss).clone()).map_err(|d| vec![d])?;
        grads.insert(loss, seed);
    }
    for &op in body.iter().rev() {
        if !act.op_active(m, op) {
            continue;
        }
        let Some(dy) = m.op(op).results.first().and_then(|r| grads.get(r)).copied() else {
            continue;
        };
        e.span = m.op(op).span;
        let operands = m.op(op).operands.to_vec();
        let active: Vec<bool> = operands.iter().map(|&v| act.active(v)).collect();
        let parts = rules::apply(&mut e, m, op, dy, &active).map_err(|d| vec![d])?;
        for (i, g) in parts {
            let Some(&v) = operands.get(i) else { continue };
            let sum = match grads.get(&v) {
                Some(&prev) => e.binary(m, T::Add, prev, g).map_err(|d| vec![d])?,
                None => g,
            };
            // Name gradients after what they differentiate, so printed IR reads `%d_x`.
            if m.value(sum).name.is_none() {
                if let Some(name) = m.value(v).name.clone() {
                    m.set_value_name(sum, format!("d_{name}"));
                }
            }
            grads.insert(v, sum);
        }
    }

    e.span = ret_span;
    let mut out = Vec::with_capacity(seeds.len());
    for &a in &seeds {
        let g = match grads.get(&a) {
            Some(&g) => g,
            // The loss does not depend on this argument: its gradient is zero.
            None => e.constant(m, 0.0, m.value_type(a).clone()).map_err(|d| vec![d])?,
        };
        out.push(g);
    }
    Ok(Joint { results, grads: out })
}
