//! Graph analysis shared by the FBLayout passes: which ops reduce which axes of which tensors,
//! the per-use refinement of operator classes (Sec. 4.1), reuse between the forward and the
//! backward pass (Sec. 3.1, `E_reuse`), and reduction-axis conflicts.
//!
//! A *tensor* is a function argument or an op result, seen through `layout.assign` (which only
//! annotates): [`root`] finds it. Reductions are traced through `layout.assign` and through
//! `tensor.transpose` (whose axes map back one to one), so a weight read as `Wᵀ` by an explicit
//! transpose still counts as reduced along the right axis of `W`.

use std::collections::{BTreeMap, BTreeSet};

use fbc_dialects::kind::{LayoutOp, OpKind, TensorOp as T};
use fbc_dialects::tensor::normalize_axis;
use fbc_ir::{Attr, FbClass, Module, Op, Type, Value, ValueDef};

use super::perf_model::{Axis2, Consumer, ConsumerKind};

/// The tensor `v` stands for: `v` with every `layout.assign` looked through.
pub fn root(m: &Module, mut v: Value) -> Value {
    while let Some(op) = m.defining_op(v) {
        let d = m.op(op);
        if LayoutOp::Assign.is(d) && !d.operands.is_empty() {
            v = d.operands[0];
        } else {
            break;
        }
    }
    v
}

fn shape_of(m: &Module, v: Value) -> Option<&[u64]> {
    match m.value_type(v) {
        Type::Tensor(t) => Some(&t.shape),
        _ => None,
    }
}

fn rank_of(m: &Module, v: Value) -> usize {
    shape_of(m, v).map_or(0, <[u64]>::len)
}

fn attr_axis(m: &Module, op: Op, rank: usize) -> Option<usize> {
    let a = m.op(op).attr("axis").and_then(Attr::as_int).unwrap_or(-1);
    normalize_axis(a, rank)
}

/// The axes of operand `i` of `op` (in the operand's own numbering) that `op` reduces over, or
/// `None` when `op` does not reduce that operand. Reductions: matmul (both operands, along K),
/// `reduce_sum`/`reduce_max`/`reduce_mean`, `softmax` and `softmax_grad`, `layernorm`, `rmsnorm`,
/// `cross_entropy` and its grad (along the class axis), `unbroadcast` (the summed axes), and the
/// norm grads (every axis: `dx` reduces along the normalized axis, `dgamma` across the others),
/// the convolutions and `group_norm`.
pub fn reduced_axes(m: &Module, op: Op, i: usize) -> Option<BTreeSet<usize>> {
    let d = m.op(op);
    let v = *d.operands.get(i)?;
    let r = rank_of(m, v);
    let flag = |k: &str| d.attr(k).and_then(Attr::as_bool).unwrap_or(false);
    let one = |a: usize| Some(BTreeSet::from([a]));
    let all = || Some((0..r).collect::<BTreeSet<_>>());
    // Every tensor op answers: a new op says here which of its operands it reduces.
    let t = match OpKind::of_op(d)? {
        OpKind::Tensor(t) => t,
        OpKind::Func(_) | OpKind::Layout(_) | OpKind::Memory(_) => return None,
    };
    match t {
        // Scores reduce `q` and `k` along the head dimension, the product with `v` its keys.
        T::Attention => match i {
            0 | 1 => one(3),
            2 => one(2),
            _ => None,
        },
        T::Matmul if r >= 2 => match i {
            0 => one(if flag("transpose_a") { r - 2 } else { r - 1 }),
            1 => one(if flag("transpose_b") { r - 1 } else { r - 2 }),
            _ => None,
        },
        fbc_dialects::tensor_reductions!() if i == 0 => {
            let axes = d.attr("axes").and_then(Attr::as_ints)?;
            axes.iter().map(|&a| normalize_axis(a, r)).collect()
        }
        T::Softmax | T::Layernorm if i == 0 => one(attr_axis(m, op, r)?),
        T::SoftmaxGrad if i <= 1 => one(attr_axis(m, op, r)?),
        T::Rmsnorm | T::CrossEntropy | T::CrossEntropyGrad if i == 0 && r >= 1 => one(r - 1),
        T::LayernormGrad | T::RmsnormGrad if i == 0 || i == 2 => all(),
        // A convolution reduces its input over the channels (and a window of H, W), its weight
        // over `(C/groups, KH, KW)`; the input gradient reduces `dy` over `O` and the weight over
        // its `O`; the weight gradient reduces both operands over `(N, OH, OW)`.
        T::Conv2d if i == 0 && r == 4 => one(1),
        T::Conv2d if i == 1 && r == 4 => Some(BTreeSet::from([1, 2, 3])),
        T::Conv2dGradInput if r == 4 => one(if i == 0 { 1 } else { 0 }),
        T::Conv2dGradWeight if r == 4 => Some(BTreeSet::from([0, 2, 3])),
        // Group norm reduces each sample over its group's channels and positions; its gradient
        // also reduces across samples for `dgamma`, `dbeta`.
        T::GroupNorm if i == 0 => Some((1..r).collect()),
        T::GroupNormGrad if i == 0 || i == 2 => all(),
        T::Unbroadcast if i == 0 => {
            let to = d.attr("shape").and_then(Attr::as_ints)?;
            let from = shape_of(m, v)?;
            let lead = r.checked_sub(to.len())?;
            let mut axes: BTreeSet<usize> = (0..lead).collect();
            for (k, &t) in to.iter().enumerate() {
                if t == 1 && from[lead + k] != 1 {
                    axes.insert(lead + k);
                }
            }
            Some(axes)
        }
        // The reductions above for their other operands (or a rank too small to reduce);
        // elementwise ops, data movement, gathers and the other backward helpers reduce nothing.
        fbc_dialects::tensor_vjps!()
        | fbc_dialects::tensor_elementwise_binary!()
        | fbc_dialects::tensor_elementwise_unary!()
        | fbc_dialects::tensor_reductions!()
        | fbc_dialects::tensor_data_movement!()
        | T::Matmul
        | T::Softmax
        | T::Layernorm
        | T::Rmsnorm
        | T::CrossEntropy
        | T::Unbroadcast
        | T::Constant
        | T::Scale
        | T::Select
        | T::Cast
        | T::Rope
        | T::Embedding
        | T::SliceGrad
        | T::UpdateSlice
        | T::CausalMask
        | T::Conv2d
        | T::GroupNorm
        | T::Upsample
        | T::Dequantize
        | T::Ge => None,
    }
}

/// One op reducing (part of) a tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct ReductionUse {
    pub op: Op,
    /// The operand of `op` that reads the tensor (possibly through assigns and transposes).
    pub operand: usize,
    /// The tensor's axes (its own numbering) that `op` reduces.
    pub axes: BTreeSet<usize>,
    /// The use as the performance model sees it: present when the tensor has rank ≥ 2 and
    /// exactly one of its two tiled axes is reduced.
    pub consumer: Option<Consumer>,
}

fn consumer_of(
    m: &Module,
    op: Op,
    operand: usize,
    root_rank: usize,
    axes: &BTreeSet<usize>,
) -> Option<Consumer> {
    if root_rank < 2 {
        return None;
    }
    let (h, w) = (root_rank - 2, root_rank - 1);
    let reduce = match (axes.contains(&h), axes.contains(&w)) {
        (true, false) => Axis2::H,
        (false, true) => Axis2::W,
        _ => return None,
    };
    let d = m.op(op);
    let kind = if T::Matmul.is(d) {
        let out = shape_of(m, *d.results.first()?)?;
        let n = out.len();
        if n < 2 {
            return None;
        }
        let out_batch = out[..n - 2].iter().product::<u64>().max(1);
        // Operand a's rows become the result's rows (M); operand b's columns its columns (N).
        let (p_is_out_last, other) =
            if operand == 1 { (true, out[n - 2]) } else { (false, out[n - 1]) };
        ConsumerKind::Matmul { p_is_out_last, other, out_batch }
    } else {
        ConsumerKind::Reduction
    };
    Some(Consumer { reduce, kind })
}

/// Every reduction of tensor `v` (a [`root`]), found through `layout.assign` and
/// `tensor.transpose`, in op order.
pub fn reduction_uses(m: &Module, v: Value) -> Vec<ReductionUse> {
    let root_rank = rank_of(m, v);
    let mut out = Vec::new();
    // (value, to_root): axis k of `value` is axis to_root[k] of the root.
    let mut work: Vec<(Value, Vec<usize>)> = vec![(v, (0..root_rank).collect())];
    let mut seen = BTreeSet::new();
    while let Some((x, to_root)) = work.pop() {
        if !seen.insert(x) {
            continue;
        }
        for u in &m.value(x).uses {
            let d = m.op(u.op);
            if d.erased {
                continue;
            }
            let i = u.index as usize;
            if LayoutOp::Assign.is(d) {
                if let Some(&r) = d.results.first() {
                    work.push((r, to_root.clone()));
                }
            } else if T::Transpose.is(d) {
                let perm = d.attr("perm").and_then(Attr::as_ints).unwrap_or_default();
                let mapped: Option<Vec<usize>> = perm
                    .iter()
                    .map(|&p| usize::try_from(p).ok().and_then(|p| to_root.get(p).copied()))
                    .collect();
                if let (Some(mapped), Some(&r)) = (mapped, d.results.first()) {
                    work.push((r, mapped));
                }
            } else if let Some(axes) = reduced_axes(m, u.op, i) {
                let axes: BTreeSet<usize> =
                    axes.iter().filter_map(|&a| to_root.get(a).copied()).collect();
                let consumer = consumer_of(m, u.op, i, root_rank, &axes);
                out.push(ReductionUse { op: u.op, operand: i, axes, consumer });
            }
        }
    }
    out.sort_by_key(|r| (r.op, r.operand));
    out
}

/// Whether reductions of `v` disagree on the axes they reduce (Sec. 3.1, the reduction-axis
/// conflict): at least two reductions with different axis sets.
pub fn has_conflict(uses: &[ReductionUse]) -> bool {
    let sets: BTreeSet<&BTreeSet<usize>> = uses.iter().map(|u| &u.axes).collect();
    sets.len() >= 2
}

/// Whether the module is a training graph: some op carries `fbc.backward` (set by `autodiff`).
pub fn is_training(m: &Module) -> bool {
    m.all_ops().any(|o| m.op(o).attr("fbc.backward").is_some())
}

fn is_backward(m: &Module, op: Op) -> bool {
    m.op(op).attr("fbc.backward").is_some()
}

/// Whether the backward pass reads tensor `v` (an `E_reuse` edge): its producer carries
/// `fbc.reuse`, it is an argument listed in its function's `fbc.reuse_args`, or a backward op
/// reads it (directly or through `layout.assign`).
pub fn reused_in_backward(m: &Module, v: Value) -> bool {
    let v = root(m, v);
    match m.value(v).def {
        ValueDef::Result { op, .. } if m.op(op).attr("fbc.reuse").is_some() => return true,
        ValueDef::Arg { func, index } => {
            let listed = m
                .func(func)
                .attr("fbc.reuse_args")
                .and_then(Attr::as_ints)
                .is_some_and(|a| a.contains(&i64::from(index)));
            if listed {
                return true;
            }
        }
        ValueDef::Result { .. } => {}
    }
    let mut work = vec![v];
    while let Some(x) = work.pop() {
        for u in &m.value(x).uses {
            let d = m.op(u.op);
            if d.erased {
                continue;
            }
            if is_backward(m, u.op) {
                return true;
            }
            if LayoutOp::Assign.is(d) {
                work.extend(d.results.first().copied());
            }
        }
    }
    false
}

/// An op's class as declared by its dialect and as refined for this graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpClass {
    pub declared: Option<FbClass>,
    pub refined: Option<FbClass>,
    /// Why `refined` differs from `declared`.
    pub reason: Option<&'static str>,
}

fn to_independent(c: FbClass) -> FbClass {
    match c {
        FbClass::FtdC => FbClass::FtiC,
        FbClass::FtdD => FbClass::FtiD,
        other => other,
    }
}

/// The class of `op` in this graph (`training`: [`is_training`] of the module).
///
/// Refinements, applied in order:
/// 1. a `tensor.reshape` or `tensor.transpose` (FTI-D) whose result is used, only by
///    elementwise ops, is FTI-C: its consumers read through the index map with the same
///    access pattern forward and backward (Table 2's "Index Elim" next to FTI-C/FTD-C);
/// 2. in a training graph, a forward op (neither `fbc.backward` nor `fbc.optimizer`) declared
///    FTD-* none of whose operands and results the backward reads is FTI-*: in this graph its
///    backward needs no forward tensor (e.g. it only feeds frozen parameters' paths).
pub fn classify(m: &Module, op: Op, training: bool) -> OpClass {
    let d = m.op(op);
    let declared = d.def.class;
    let mut c = OpClass { declared, refined: declared, reason: None };
    if declared == Some(FbClass::FtiD) && (T::Reshape.is(d) || T::Transpose.is(d)) {
        let uses = d.results.first().map(|&r| &m.value(r).uses);
        let only_elementwise = uses
            .is_some_and(|u| !u.is_empty() && u.iter().all(|u| m.op(u.op).def.traits.elementwise));
        if only_elementwise {
            c.refined = Some(FbClass::FtiC);
            c.reason = Some("feeds only elementwise ops");
            return c;
        }
    }
    let forward = d.attr("fbc.backward").is_none() && d.attr("fbc.optimizer").is_none();
    if training && forward && matches!(declared, Some(FbClass::FtdC | FbClass::FtdD)) {
        let reused = d.operands.iter().chain(&d.results).any(|&v| reused_in_backward(m, v));
        if !reused {
            c.refined = declared.map(to_independent);
            c.reason = Some("the backward reads none of its tensors");
        }
    }
    c
}

/// A printable name for a value: its source name, or `%N`.
pub fn value_name(m: &Module, v: Value) -> String {
    match m.value(v).name.as_deref() {
        Some(n) => format!("%{n}"),
        None => format!("%{}", v.index()),
    }
}

/// Every tensor (argument or op result, not an assign result) of the module, in function and
/// op order.
pub fn tensors(m: &Module) -> Vec<Value> {
    let mut out = Vec::new();
    for f in m.func_ids() {
        out.extend(m.func(f).args.iter().copied());
        for &op in &m.func(f).body {
            let d = m.op(op);
            if !LayoutOp::Assign.is(d) {
                out.extend(d.results.iter().copied());
            }
        }
    }
    out.retain(|&v| matches!(m.value_type(v), Type::Tensor(_)));
    out
}

fn axes_text(a: &BTreeSet<usize>) -> String {
    let v: Vec<String> = a.iter().map(ToString::to_string).collect();
    format!("[{}]", v.join(", "))
}

/// The classification table of a module (what `fb-classify{print=true}` prints): per function,
/// one row per op with its declared and refined class, the axes it reduces per operand and
/// whether it produces a tensor with a reduction conflict; then every conflicting tensor with its
/// reductions. Computed from the module itself, so it works before or after `fb-classify`.
pub fn classification_table(m: &Module) -> String {
    let training = is_training(m);
    let conflicts: BTreeMap<Value, Vec<ReductionUse>> = tensors(m)
        .into_iter()
        .map(|v| (v, reduction_uses(m, v)))
        .filter(|(_, u)| has_conflict(u))
        .collect();
    let mut out = String::new();
    for f in m.func_ids() {
        let fd = m.func(f);
        out.push_str(&format!("@{}{}\n", fd.name, if training { " (training graph)" } else { "" }));
        let mut rows: Vec<[String; 6]> =
            vec![["op", "results", "class", "refined", "reduces", "conflict"].map(String::from)];
        for &op in &fd.body {
            let d = m.op(op);
            let c = classify(m, op, training);
            let name = |x: Option<FbClass>| x.map_or("-".to_string(), |c| c.name().to_string());
            let results: Vec<String> = d.results.iter().map(|&r| value_name(m, r)).collect();
            let reduces: Vec<String> = (0..d.operands.len())
                .filter_map(|i| {
                    reduced_axes(m, op, i)
                        .map(|a| format!("{}:{}", value_name(m, d.operands[i]), axes_text(&a)))
                })
                .collect();
            let conflict = d.results.iter().any(|r| conflicts.contains_key(r));
            let mut op_name = d.def.name.to_string();
            if d.attr("fbc.backward").is_some() {
                op_name.push_str(" (bwd)");
            }
            let refined = match c.reason {
                Some(why) => format!("{} ({why})", name(c.refined)),
                None => name(c.refined),
            };
            rows.push([
                op_name,
                results.join(", "),
                name(c.declared),
                refined,
                reduces.join(" "),
                if conflict { "yes".into() } else { String::new() },
            ]);
        }
        let widths: Vec<usize> =
            (0..6).map(|k| rows.iter().map(|r| r[k].chars().count()).max().unwrap_or(0)).collect();
        for r in &rows {
            let mut line = String::from(" ");
            for (k, cell) in r.iter().enumerate() {
                line.push(' ');
                line.push_str(cell);
                if k + 1 < r.len() {
                    line.push_str(&" ".repeat(widths[k] - cell.chars().count() + 1));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        let mine: Vec<(&Value, &Vec<ReductionUse>)> =
            conflicts.iter().filter(|(v, _)| func_of(m, **v) == Some(f)).collect();
        if !mine.is_empty() {
            out.push_str("  reduction conflicts:\n");
            for (&v, uses) in mine {
                let what = match m.value(v).def {
                    ValueDef::Arg { index, .. } => format!("argument {index}"),
                    ValueDef::Result { op, .. } => format!("result of {}", m.op(op).def.name),
                };
                let parts: Vec<String> = uses
                    .iter()
                    .map(|u| {
                        let d = m.op(u.op);
                        let res = d.results.first().map_or(String::new(), |&r| value_name(m, r));
                        format!("{} {} reduces {}", d.def.name, res, axes_text(&u.axes))
                    })
                    .collect();
                out.push_str(&format!(
                    "    {} ({what}, {}): {}\n",
                    value_name(m, v),
                    m.value_type(v),
                    parts.join("; ")
                ));
            }
        }
    }
    out
}

/// The function a value belongs to.
pub fn func_of(m: &Module, v: Value) -> Option<fbc_ir::FuncId> {
    match m.value(v).def {
        ValueDef::Arg { func, .. } => Some(func),
        ValueDef::Result { op, .. } => Some(m.op(op).func),
    }
}
