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
//!   composition is the identity) and `reshape(reshape(x))` becomes `reshape(x)`;
//! - scale sinking: a `tensor.scale` by a power of two whose result only contractions read
//!   (directly or through `reshape` / `transpose`), each contraction's result smaller than the
//!   scaled tensor, moves behind them: `matmul(reshape(scale(x, f)), b)` becomes
//!   `scale(matmul(reshape(x), b), f)`. The contraction's epilogue then does the multiply on the
//!   small result instead of a pass over the large one (a LoRA branch's backward scales `dY`,
//!   512 × 8192 in a Llama MLP, only for `dY·Bᵀ` and `(x·A)ᵀ·dY`, 512 × 8 and 8 × 8192). A
//!   power of two scales every product and partial sum exactly, so the results are the same
//!   bits (barring overflow to infinity and values below f32's normal range).
//!
//! Ops made dead by a rewrite are removed at the end, as MLIR's greedy driver does.

use fbc_dialects::kind::TensorOp as T;
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
        let constant = cx.registry.expect(T::Constant.name());
        let transpose = cx.registry.expect(T::Transpose.name());
        let reshape = cx.registry.expect(T::Reshape.name());
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
        let scale = cx.registry.expect(T::Scale.name());
        let sunk: usize = (0..m.funcs.len()).map(|f| sink_scales(m, f, scale)).sum();
        cx.stats.add("canonicalize", "rewrites", total as i64);
        cx.stats.add("canonicalize", "scales-sunk", sunk as i64);
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
    if T::Constant.is(d) {
        d.attr("value").and_then(fbc_dialects::tensor::splat)
    } else {
        None
    }
}

/// The value of op `t` on splat operands `x`, for the ops that fold; `None` for the others and
/// for operands of the wrong count. Data movement of a splat is the splat. (`fbc import` folds
/// known ONNX values with it too.)
pub fn fold(t: T, x: &[f64], factor: Option<f64>) -> Option<f64> {
    let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
    let unary = |f: &dyn Fn(f64) -> f64| match x {
        [x] => Some(f(*x)),
        _ => None,
    };
    let binary = |f: &dyn Fn(f64, f64) -> f64| match x {
        [a, b] => Some(f(*a, *b)),
        _ => None,
    };
    match t {
        T::Neg => unary(&|x| -x),
        T::Exp => unary(&f64::exp),
        T::Log => unary(&f64::ln),
        T::Sqrt => unary(&f64::sqrt),
        T::Rsqrt => unary(&|x| 1.0 / x.sqrt()),
        T::Tanh => unary(&f64::tanh),
        T::Sigmoid => unary(&sigmoid),
        T::Relu => unary(&|x| x.max(0.0)),
        T::Silu => unary(&|x| x * sigmoid(x)),
        T::Scale => factor.and_then(|f| unary(&|x| x * f)),
        T::Reshape | T::Transpose | T::Broadcast | T::Cast => unary(&|x| x),
        T::Add => binary(&|a, b| a + b),
        T::Sub => binary(&|a, b| a - b),
        T::Mul => binary(&|a, b| a * b),
        T::Div => binary(&|a, b| a / b),
        T::Max => binary(&f64::max),
        T::Min => binary(&f64::min),
        T::Pow => binary(&f64::powf),
        T::Select => match x {
            [m, a, b] => Some(if *m != 0.0 { *a } else { *b }),
            _ => None,
        },
        // A constant is folded already; GELU's erf has no f64 form in std; the rest reduce,
        // index, normalise or are backward helpers, which splat folding does not cover.
        fbc_dialects::tensor_vjps!()
        | fbc_dialects::tensor_reductions!()
        | T::Constant
        | T::Gelu
        | T::Erf
        | T::Matmul
        | T::Softmax
        | T::Layernorm
        | T::Rmsnorm
        | T::Rope
        | T::Embedding
        | T::CrossEntropy
        | T::Slice
        | T::Concat
        | T::Unbroadcast
        | T::SliceGrad
        | T::UpdateSlice
        | T::CausalMask
        | T::Attention
        | T::Conv2d
        | T::GroupNorm
        | T::Upsample
        | T::Dequantize
        | T::Ge => None,
    }
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
    let kind = T::of(d.def)?;
    let result = d.results[0];
    let result_ty = m.value_type(result).clone();
    let operands = d.operands.to_vec();
    let (func, span) = (d.func, d.span);

    // Constant folding.
    let elem = result_ty.as_tensor().map(|t| t.elem);
    if matches!(elem, Some(ElemType::F32 | ElemType::F64)) && kind != T::Constant {
        let splats: Option<Vec<f64>> = operands.iter().map(|&v| splat_of(m, v)).collect();
        let factor = d.attr("factor").and_then(Attr::as_float);
        let folded = splats.and_then(|x| fold(kind, &x, factor));
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
    // Identities and compositions of data movement; every other op stays.
    match kind {
        T::Reshape | T::Broadcast if input_ty == result_ty => {
            Some(Rewrite { new_ops: vec![], replacement: input })
        }
        T::Transpose => {
            let perm = d.attr("perm").and_then(Attr::as_ints)?;
            if is_identity(&perm) {
                return Some(Rewrite { new_ops: vec![], replacement: input });
            }
            let inner = m.defining_op(input)?;
            let inner_d = m.op(inner);
            if !T::Transpose.is(inner_d) {
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
        T::Reshape => {
            let inner = m.defining_op(input)?;
            let inner_d = m.op(inner);
            if !T::Reshape.is(inner_d) {
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

/// Scale sinking (the module doc) over function `f`'s body; returns how many scales moved.
fn sink_scales(m: &mut Module, f: usize, scale: &'static OpDef) -> usize {
    let mut sunk = 0;
    for op in m.funcs[f].body.clone() {
        let Some(products) = sinkable_scale(m, op) else { continue };
        let d = m.op(op);
        let (input, result) = (d.operands[0], d.results[0]);
        // The factor and what the op is (a backward op); not what later passes annotated the
        // scaled tensor with (its class, layout), which is not the product's.
        let attrs: Vec<(String, Attr)> = d
            .attrs
            .iter()
            .filter(|(k, _)| !k.starts_with("fbc.") || k == "fbc.backward")
            .cloned()
            .collect();
        // Every reader of the scale is data movement or a contraction: reading `x` instead,
        // each contraction's result is its old one divided by the factor.
        m.replace_all_uses(result, input);
        for p in products {
            let pd = m.op(p);
            let (out, func, span) = (pd.results[0], pd.func, pd.span);
            let readers = m.value(out).uses.clone();
            let ty = m.value_type(out).clone();
            let s = m.create_op(func, scale, &[out], attrs.clone(), vec![ty], span);
            let scaled = m.op(s).results[0];
            for u in readers {
                m.set_operand(u.op, u.index as usize, scaled);
            }
            // The product's name goes to the value its readers now see.
            if let Some(name) = m.value(out).name.clone() {
                m.set_value_name(scaled, name.clone());
                m.set_value_name(out, format!("{name}_unscaled"));
            }
            let body = &mut m.funcs[f].body;
            let at = body.iter().position(|&o| o == p).map_or(body.len(), |i| i + 1);
            body.insert(at, s);
        }
        sunk += 1;
    }
    sunk
}

/// The contractions that read scale `op` where scale sinking applies to it (the module doc):
/// its factor is a power of two, its element type f32 or f64, every reader is a `reshape` or
/// `transpose` (followed in turn) or a `tensor.matmul` that reads it once, and the
/// contractions' results have fewer elements in all than the scale's.
fn sinkable_scale(m: &Module, op: Op) -> Option<Vec<Op>> {
    let d = m.op(op);
    if !T::Scale.is(d) || d.operands.len() != 1 || d.results.len() != 1 {
        return None;
    }
    let factor = d.attr("factor").and_then(Attr::as_float)?;
    if !is_power_of_two(factor) {
        return None;
    }
    let ty = m.value_type(d.results[0]).as_tensor()?;
    if !matches!(ty.elem, ElemType::F32 | ElemType::F64) {
        return None;
    }
    let (mut products, mut product_elems) = (Vec::new(), 0u64);
    let mut pending = vec![d.results[0]];
    while let Some(v) = pending.pop() {
        for u in &m.value(v).uses {
            let r = m.op(u.op);
            match T::of(r.def) {
                Some(T::Reshape | T::Transpose) => pending.push(r.results[0]),
                Some(T::Matmul) if !products.contains(&u.op) => {
                    products.push(u.op);
                    let out = m.value_type(r.results[0]).as_tensor()?;
                    product_elems = product_elems.saturating_add(out.numel()?);
                }
                // Another reader, or both operands of one product (the factor twice).
                _ => return None,
            }
        }
    }
    (!products.is_empty() && product_elems < ty.numel()?).then_some(products)
}

/// Whether `f` is ± a power of two in f64's normal range (its mantissa bits all zero).
fn is_power_of_two(f: f64) -> bool {
    f.is_normal() && f.to_bits() & ((1u64 << 52) - 1) == 0
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
