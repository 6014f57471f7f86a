//! Reverse-mode automatic differentiation (`autodiff`) and training steps (`train-step`): they
//! turn a loss function into the joint forward+backward training graph of the FBLayout paper
//! (Sec. 3.1, `G = (V_fwd ∪ V_bwd, E_fwd ∪ E_bwd ∪ E_reuse)`) that the layout passes optimise.
//!
//! # `autodiff{func=F wrt=A,B}`
//!
//! Adds `@F_grad`, taking `F`'s arguments and returning `F`'s results followed by the gradients
//! of result 0 (a rank-0 float tensor, the loss) with respect to `A`, `B`, in that order. The
//! body is `F`'s forward computation (calls inlined: see [`inline`]) followed by the backward
//! computation, built by a reverse sweep with one rule per op ([`rules`]); values with several
//! uses get their gradient contributions summed with `tensor.add`. Arguments not in `wrt` are
//! frozen: no gradient code is built for them (activity analysis, [`joint`]), nor for integer
//! values (ids, labels). Dead code is removed from `@F_grad` with the `dce` helper; other
//! functions are left exactly as they were. An argument the loss does not depend on gets a zero
//! gradient (`tensor.constant 0.0`).
//!
//! Errors, each a located diagnostic, and the module is left unchanged: no function `F`; an
//! `@F_grad` that exists already; a `wrt` name that is not an argument of `F`, is repeated, or is
//! not a float tensor; a result 0 that is not a rank-0 float tensor; a recursive call; an op on
//! the path from a `wrt` argument to the loss that has no gradient rule (named).
//!
//! # Marking: `fbc.backward`, `fbc.reuse`, `fbc.reuse_args`
//!
//! - Every op of the backward computation carries the discardable unit attribute `fbc.backward`
//!   (`V_bwd`); forward ops carry none (`V_fwd`).
//! - Every forward op whose result is read by a backward op carries `fbc.reuse`: the producer end
//!   of an `E_reuse` edge (a forward tensor kept for the backward pass: matmul operands, softmax
//!   outputs, layernorm inputs, ...).
//! - Function arguments read by backward ops are listed on the generated function as
//!   `fbc.reuse_args = [i, ...]` (sorted argument indices; absent when there are none).
//! - `train-step`'s parameter-update ops carry `fbc.optimizer`; they are neither forward nor
//!   backward, and their reads do not count as reuse.
//!
//! # `train-step{func=F wrt=A,B optimizer=sgd|adamw lr beta1 beta2 eps weight_decay}`
//!
//! Adds `@F_step`: the same joint graph, followed by the parameter update, all in tensor ops.
//! - `sgd`: arguments are `F`'s; results `(loss, A', B', ...)` with
//!   `p' = p·(1 - lr·wd) - lr·g` (L2 and decoupled weight decay coincide for SGD).
//! - `adamw`: arguments are `F`'s, then `m_A, v_A, m_B, v_B, ...` (first and second moments, each
//!   of its parameter's type), then `step: tensor<f32>` (rank 0, the loss's element type): the
//!   1-based step number `t` as a float. Results are `(loss, A', B', ..., m_A', v_A', m_B', v_B',
//!   ...)`. With `m' = β1·m + (1-β1)·g`, `v' = β2·v + (1-β2)·g²`, and the bias corrections
//!   `c1 = 1 - β1^t`, `c2 = 1 - β2^t` computed in the graph as `1 - exp(t·ln β)` (so one
//!   compiled step serves every iteration; no recompilation per step):
//!   `p' = p·(1 - lr·wd) - lr·(m'/c1) / (√(v'/c2) + eps)` (decoupled weight decay, as AdamW).
//!
//! Option values are checked when the pass is created: `optimizer` is `sgd` or `adamw`, `lr` and
//! `eps` are finite (`eps ≥ 0`), `0 ≤ beta1, beta2 < 1`, `weight_decay` is finite and `≥ 0`.

mod emit;
pub(crate) mod inline;
mod joint;
mod rules;
mod train_step;

use std::collections::BTreeSet;

use fbc_dialects::kind::FuncOp;
use fbc_ir::pass::{OptionKind, OptionSpec, PassInfo, PassRegistry};
use fbc_ir::{
    Attr, Diagnostic, FuncId, Module, Op, OpRegistry, Pass, PassContext, Span, Type, Value,
    ValueDef,
};

use emit::{internal, BACKWARD, REUSE, REUSE_ARGS};

/// Registers `autodiff` and `train-step`.
pub fn register(registry: &mut PassRegistry) {
    registry.register(PassInfo::new(
        "autodiff",
        "reverse-mode autodiff: add @F_grad returning F's results and d(result 0)/d(wrt args)",
        vec![
            OptionSpec::new("func", OptionKind::Str, None, "the function to differentiate"),
            OptionSpec::new(
                "wrt",
                OptionKind::List,
                None,
                "the arguments to differentiate with respect to (others are frozen)",
            ),
        ],
        |o| {
            Ok(Box::new(Autodiff {
                func: o.str("func").unwrap_or_default().to_string(),
                wrt: o.list("wrt"),
            }))
        },
    ));
    train_step::register(registry);
}

/// The `autodiff` pass.
#[derive(Debug, Clone)]
pub struct Autodiff {
    pub func: String,
    pub wrt: Vec<String>,
}

impl Pass for Autodiff {
    fn name(&self) -> &str {
        "autodiff"
    }

    fn run(&mut self, m: &mut Module, cx: &mut PassContext<'_>) -> Result<(), Vec<Diagnostic>> {
        // Work on a copy so that a failure leaves the module exactly as it was.
        let mut work = m.clone();
        let new_name = format!("{}_grad", self.func);
        let r = resolve(&work, "autodiff", &self.func, &self.wrt, &new_name)?;
        let results = r.grad_result_types(&work);
        let dst = new_function(&mut work, r.src, &new_name, &[], &results);
        let j = joint::build_joint(&mut work, cx.registry, r.src, dst, &r.wrt)?;
        let mut returned = j.results;
        returned.extend(j.grads);
        let stats = finish(&mut work, cx.registry, dst, &returned, r.ret_span)?;
        *m = work;
        stats.record(cx, "autodiff");
        Ok(())
    }
}

/// A checked request: the function, the argument indices, where its return is.
#[derive(Debug)]
pub(crate) struct Resolved {
    pub src: FuncId,
    pub wrt: Vec<usize>,
    pub ret_span: Span,
}

impl Resolved {
    /// `F`'s result types followed by the types of the `wrt` arguments.
    fn grad_result_types(&self, m: &Module) -> Vec<Type> {
        let f = m.func(self.src);
        let mut types = f.result_types.clone();
        types.extend(self.wrt.iter().map(|&i| m.value_type(f.args[i]).clone()));
        types
    }
}

/// The name of argument `a` (`x` for `%x`), or its index.
fn arg_name(m: &Module, a: Value, index: usize) -> String {
    m.value(a).name.as_deref().map_or_else(|| index.to_string(), str::to_string)
}

/// Checks the options of `pass` against the module: `func` exists, `new_name` does not, every
/// `wrt` name is a float tensor argument (once), result 0 is a rank-0 float tensor.
pub(crate) fn resolve(
    m: &Module,
    pass: &str,
    func: &str,
    wrt: &[String],
    new_name: &str,
) -> Result<Resolved, Vec<Diagnostic>> {
    let Some(src) = m.find_func(func) else {
        let known: Vec<String> = m.funcs.iter().map(|f| format!("@{}", f.name)).collect();
        let known = if known.is_empty() { "none".to_string() } else { known.join(", ") };
        let mut d = Diagnostic::error(format!("{pass}: no function named @{func} in this module"))
            .with_note(format!("the module's functions: {known}"));
        if let Some(f) = m.funcs.first() {
            d = d.at(f.name_span).with_label("looked for `func` among these functions");
        }
        return Err(vec![d]);
    };
    let f = m.func(src);
    if let Some(existing) = m.find_func(new_name) {
        return Err(vec![Diagnostic::error(format!(
            "{pass}: cannot add @{new_name}: the module already has a function of that name"
        ))
        .at(m.func(existing).name_span)
        .with_label("defined here")]);
    }
    let mut errors = Vec::new();
    let names: Vec<String> = f.args.iter().enumerate().map(|(i, &a)| arg_name(m, a, i)).collect();
    if wrt.is_empty() {
        errors.push(
            Diagnostic::error(format!("{pass}: `wrt` names no argument of @{func}"))
                .at(f.name_span)
                .with_note(format!("the arguments of @{func}: %{}", names.join(", %"))),
        );
    }
    let mut indices = Vec::with_capacity(wrt.len());
    for w in wrt {
        let w = w.strip_prefix('%').unwrap_or(w);
        let Some(i) = names.iter().position(|n| n == w) else {
            errors.push(
                Diagnostic::error(format!("{pass}: @{func} has no argument %{w}"))
                    .at(f.name_span)
                    .with_label(format!("`wrt` names %{w}"))
                    .with_note(format!("the arguments of @{func}: %{}", names.join(", %"))),
            );
            continue;
        };
        if indices.contains(&i) {
            errors.push(
                Diagnostic::error(format!("{pass}: `wrt` names %{w} twice"))
                    .at(f.name_span)
                    .with_note("each argument's gradient is returned once"),
            );
            continue;
        }
        let ty = m.value_type(f.args[i]);
        if !matches!(ty, Type::Tensor(t) if t.elem.is_float()) {
            errors.push(
                Diagnostic::error(format!(
                    "{pass}: cannot differentiate with respect to %{w}: it is {ty}, not a float tensor"
                ))
                .at(f.name_span)
                .with_note("only float tensors have gradients; ids and labels are constants of the loss"),
            );
            continue;
        }
        indices.push(i);
    }
    let ret = f.body.last().copied().filter(|&r| m.op(r).def.traits.terminator);
    let ret_span = ret.map_or(f.name_span, |r| m.op(r).span);
    match f.result_types.first() {
        Some(Type::Tensor(t)) if t.rank() == 0 && t.elem.is_float() => {}
        other => {
            let found = other.map_or_else(|| "no result".to_string(), |t| t.to_string());
            let span = ret.map_or(f.name_span, |r| m.op(r).operand_span(0));
            errors.push(
                Diagnostic::error(format!(
                    "{pass}: result 0 of @{func} must be a scalar loss (a rank-0 float tensor such \
                     as tensor<f32>), found {found}"
                ))
                .at(span)
                .with_label("the loss autodiff differentiates")
                .with_note(
                    "reduce the loss to rank 0, e.g. with tensor.reduce_mean over every axis",
                ),
            );
        }
    }
    if errors.is_empty() {
        Ok(Resolved { src, wrt: indices, ret_span })
    } else {
        Err(errors)
    }
}

/// Adds function `name` taking `src`'s arguments (with their names) followed by `extra`
/// arguments, returning `results`. Its spans are `src`'s, so diagnostics about it point there.
pub(crate) fn new_function(
    m: &mut Module,
    src: FuncId,
    name: &str,
    extra: &[(String, Type)],
    results: &[Type],
) -> FuncId {
    let f = m.func(src);
    let (span, name_span) = (f.span, f.name_span);
    let src_args = f.args.clone();
    let mut types: Vec<Type> = src_args.iter().map(|&a| m.value_type(a).clone()).collect();
    types.extend(extra.iter().map(|(_, t)| t.clone()));
    let dst = m.add_func(name, types, results.to_vec());
    let dst_args = m.func(dst).args.clone();
    let mut taken: BTreeSet<String> = BTreeSet::new();
    for (&s, &d) in src_args.iter().zip(&dst_args) {
        if let Some(n) = m.value(s).name.clone() {
            taken.insert(n.to_string());
            m.set_value_name(d, n);
        }
    }
    for ((wanted, _), &d) in extra.iter().zip(&dst_args[src_args.len()..]) {
        // Arguments are inputs by name (`fbc run`), so a clash gets a suffix rather than sharing.
        let mut n = wanted.clone();
        let mut k = 1;
        while taken.contains(&n) {
            n = format!("{wanted}_{k}");
            k += 1;
        }
        taken.insert(n.clone());
        m.set_value_name(d, n);
    }
    let fd = m.func_mut(dst);
    fd.span = span;
    fd.name_span = name_span;
    dst
}

/// Counters of one generated function, for `--time-passes` and reports.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    backward_ops: usize,
    reuse_edges: usize,
    dead_removed: usize,
}

impl Stats {
    fn record(&self, cx: &mut PassContext<'_>, pass: &str) {
        let n = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
        cx.stats.add(pass, "backward-ops", n(self.backward_ops));
        cx.stats.add(pass, "reuse-edges", n(self.reuse_edges));
        cx.stats.add(pass, "dead-ops-removed", n(self.dead_removed));
    }
}

/// Ends `dst` with `func.return returned`, removes its dead ops, marks the reuse edges, and checks
/// that the module verifies.
pub(crate) fn finish(
    m: &mut Module,
    reg: &OpRegistry,
    dst: FuncId,
    returned: &[Value],
    span: Span,
) -> Result<Stats, Vec<Diagnostic>> {
    let ret =
        reg.get(FuncOp::Return.name()).ok_or_else(|| vec![internal(span, "no func.return op")])?;
    m.append_op(dst, ret, returned, vec![], vec![], span);
    let dead_removed = remove_dead_ops_in(m, dst);
    let reuse_edges = mark_reuse(m, dst);
    let backward_ops =
        m.func(dst).body.iter().filter(|&&o| m.op(o).attr(BACKWARD).is_some()).count();
    let errors = fbc_ir::verify_module(m);
    if !errors.is_empty() {
        let mut out = vec![internal(span, "the generated function does not verify")];
        out.extend(errors);
        return Err(out);
    }
    Ok(Stats { backward_ops, reuse_edges, dead_removed })
}

/// Runs the `dce` helper on `keep` only: the other functions' bodies are set aside meanwhile, so
/// the pass never changes a function it did not create.
fn remove_dead_ops_in(m: &mut Module, keep: FuncId) -> usize {
    let mut others: Vec<(usize, Vec<Op>)> = Vec::new();
    for i in 0..m.funcs.len() {
        if i != keep.index() {
            others.push((i, std::mem::take(&mut m.funcs[i].body)));
        }
    }
    let removed = crate::dce::remove_dead_ops(m);
    for (i, body) in others {
        m.funcs[i].body = body;
    }
    removed
}

/// Marks the `E_reuse` edges of `f`: every non-backward producer of a value a backward op reads
/// gets `fbc.reuse`; arguments read by backward ops are listed in `fbc.reuse_args`. Returns the
/// number of edges (backward operand slots reading forward values).
fn mark_reuse(m: &mut Module, f: FuncId) -> usize {
    let mut edges = 0;
    let mut producers = Vec::new();
    let mut args = BTreeSet::new();
    for &op in &m.func(f).body {
        let d = m.op(op);
        if d.attr(BACKWARD).is_none() {
            continue;
        }
        for &v in &d.operands {
            match m.value(v).def {
                ValueDef::Arg { index, .. } => {
                    args.insert(i64::from(index));
                    edges += 1;
                }
                ValueDef::Result { op: p, .. } if m.op(p).attr(BACKWARD).is_none() => {
                    producers.push(p);
                    edges += 1;
                }
                ValueDef::Result { .. } => {}
            }
        }
    }
    for p in producers {
        m.set_attr(p, REUSE, Attr::Unit);
    }
    if !args.is_empty() {
        let attrs = &mut m.func_mut(f).attrs;
        attrs.retain(|(k, _)| k != REUSE_ARGS);
        attrs.push((REUSE_ARGS.to_string(), Attr::ints(args)));
    }
    edges
}
