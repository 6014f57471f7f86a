//! `canonicalize`: local simplifications, applied until nothing changes.
//!
//! Rules (each only ever makes the graph smaller or cheaper, never changes a result):
//! - constant folding: elementwise ops, `tensor.scale`, and shape ops (`reshape`, `transpose`,
//!   `broadcast`) whose operands are splat `tensor.constant`s become one splat constant. Folding is
//!   done in f64 and rounded to the result's element type; only f32 and f64 results are folded,
//!   because rounding to f16/bf16 here would have to match the runtime bit for bit;
//! - identities: a `reshape` or `broadcast` to its operand's own type, and a `transpose` by the
//!   identity permutation, are replaced by the operand;
//! - composition: `transpose(transpose(x, p1), p2)` becomes `transpose(x, p1∘p2)` (or `x` when the
//!   composition is the identity) and `reshape(reshape(x))` becomes `reshape(x)`.
//!
//! Ops made dead by a rewrite are removed at the end, as MLIR's greedy driver does.

use fbc_ir::{Attr, Diagnostic, ElemType, Module, Op, OpDef, Pass, PassContext, Type, Value};

#[derive(Debug, Default)]
pub struct Canonicalize;

/// Upper bound on sweeps; each sweep only shrinks the graph, so this is never reached in practice.
const MAX_SWEEPS: usize = 32;

impl Pass for Canonicalize {
    fn name(&self) -> &str {
        "canonicalize"
    }

    fn run(&mut self, m: &mut Module, cx: &mut PassContext<'_>) -> Result<(), Vec<Diagnostic>> {
        let constant = cx.registry.expect("tensor.constant");
        let transpose = cx.registry.expect("tensor.transpose");
        let reshape = cx.registry.expect("tensor.reshape");
        let mut total = 0;
        for _ in 0..MAX_SWEEPS {
            let mut changed = 0;
            for f in 0..m.funcs.len() {
                let body = std::mem::take(&mut m.funcs[f].body);
                let mut out = Vec::with_capacity(body.len());
                let mut dead = Vec::new();
                for op in body {
                    match rewrite(m, op, constant, transpose, reshape) {
                        Some(Rewrite { new_ops, replacement }) => {
                            out.extend(new_ops);
                            let old = m.op(op).results[0];
                            m.replace_all_uses(old, replacement);
                            // Its uses go with the others' in one `erase_ops`.
                            dead.push(op);
                            changed += 1;
                        }
                        None => out.push(op),
                    }
                }
                m.funcs[f].body = out;
                m.erase_ops(&dead);
            }
            total += changed;
            if changed == 0 {
                break;
            }
        }
        cx.stats.add("canonicalize", "rewrites", total as i64);
        cx.stats.add("canonicalize", "dead-ops-removed", crate::dce::remove_dead_ops(m) as i64);
        Ok(())
    }
}

struct Rewrite {
    /// Ops to place where the rewritten op was (already created, not yet in a body).
    new_ops: Vec<Op>,
    /// The value that replaces the rewritten op's (single) result.
    replacement: Value,
}

fn splat_of(m: &Module, v: Value) -> Option<f64> {
    let op = m.defining_op(v)?;
    let d = m.op(op);
    if d.def.is("tensor.constant") {
        d.attr("value").and_then(Attr::as_float)
    } else {
        None
    }
}

fn fold_unary(name: &str, x: f64, factor: Option<f64>) -> Option<f64> {
    let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
    Some(match name {
        "tensor.neg" => -x,
        "tensor.exp" => x.exp(),
        "tensor.log" => x.ln(),
        "tensor.sqrt" => x.sqrt(),
        "tensor.rsqrt" => 1.0 / x.sqrt(),
        "tensor.tanh" => x.tanh(),
        "tensor.sigmoid" => sigmoid(x),
        "tensor.relu" => x.max(0.0),
        "tensor.silu" => x * sigmoid(x),
        "tensor.scale" => x * factor?,
        "tensor.reshape" | "tensor.transpose" | "tensor.broadcast" => x,
        _ => return None,
    })
}

fn fold_binary(name: &str, a: f64, b: f64) -> Option<f64> {
    Some(match name {
        "tensor.add" => a + b,
        "tensor.sub" => a - b,
        "tensor.mul" => a * b,
        "tensor.div" => a / b,
        "tensor.max" => a.max(b),
        "tensor.min" => a.min(b),
        _ => return None,
    })
}

fn rewrite(
    m: &mut Module,
    op: Op,
    constant: &'static OpDef,
    transpose: &'static OpDef,
    reshape: &'static OpDef,
) -> Option<Rewrite> {
    let d = m.op(op);
    if d.results.len() != 1 || !d.def.traits.pure {
        return None;
    }
    let name = d.def.name;
    let result = d.results[0];
    let result_ty = m.value_type(result).clone();
    let operands = d.operands.to_vec();
    let (func, span) = (d.func, d.span);

    // Constant folding.
    let elem = result_ty.as_tensor().map(|t| t.elem);
    if matches!(elem, Some(ElemType::F32 | ElemType::F64)) && name != "tensor.constant" {
        let splats: Option<Vec<f64>> = operands.iter().map(|&v| splat_of(m, v)).collect();
        let folded = match splats.as_deref() {
            Some([x]) => fold_unary(name, *x, d.attr("factor").and_then(Attr::as_float)),
            Some([a, b]) => fold_binary(name, *a, *b),
            _ => None,
        };
        if let Some(v) = folded {
            let v = if elem == Some(ElemType::F32) { f64::from(v as f32) } else { v };
            let c = m.create_op(
                func,
                constant,
                &[],
                vec![("value".into(), Attr::Float(v))],
                vec![result_ty],
                span,
            );
            let replacement = m.op(c).results[0];
            return Some(Rewrite { new_ops: vec![c], replacement });
        }
    }

    let input = *operands.first()?;
    let input_ty = m.value_type(input).clone();
    match name {
        "tensor.reshape" | "tensor.broadcast" if input_ty == result_ty => {
            Some(Rewrite { new_ops: vec![], replacement: input })
        }
        "tensor.transpose" => {
            let perm = d.attr("perm").and_then(Attr::as_ints)?;
            if is_identity(&perm) {
                return Some(Rewrite { new_ops: vec![], replacement: input });
            }
            let inner = m.defining_op(input)?;
            let inner_d = m.op(inner);
            if !inner_d.def.is("tensor.transpose") {
                return None;
            }
            let p1 = inner_d.attr("perm").and_then(Attr::as_ints)?;
            let source = inner_d.operands[0];
            // out2[j] = out1[p2[j]] = x[p1[p2[j]]]
            let composed: Option<Vec<i64>> = perm
                .iter()
                .map(|&j| usize::try_from(j).ok().and_then(|j| p1.get(j).copied()))
                .collect();
            let composed = composed?;
            if is_identity(&composed) {
                return Some(Rewrite { new_ops: vec![], replacement: source });
            }
            let t = m.create_op(
                func,
                transpose,
                &[source],
                vec![("perm".into(), Attr::ints(composed))],
                vec![result_ty],
                span,
            );
            let replacement = m.op(t).results[0];
            Some(Rewrite { new_ops: vec![t], replacement })
        }
        "tensor.reshape" => {
            let inner = m.defining_op(input)?;
            let inner_d = m.op(inner);
            if !inner_d.def.is("tensor.reshape") {
                return None;
            }
            let source = inner_d.operands[0];
            if *m.value_type(source) == result_ty {
                return Some(Rewrite { new_ops: vec![], replacement: source });
            }
            let shape = shape_attr(&result_ty)?;
            let r = m.create_op(
                func,
                reshape,
                &[source],
                vec![("shape".into(), shape)],
                vec![result_ty],
                span,
            );
            let replacement = m.op(r).results[0];
            Some(Rewrite { new_ops: vec![r], replacement })
        }
        _ => None,
    }
}

fn is_identity(perm: &[i64]) -> bool {
    perm.iter().enumerate().all(|(i, &p)| p == i as i64)
}

fn shape_attr(t: &Type) -> Option<Attr> {
    let t = t.as_tensor()?;
    Some(Attr::Array(
        t.shape.iter().map(|&d| Attr::Int(i64::try_from(d).unwrap_or(i64::MAX))).collect(),
    ))
}
