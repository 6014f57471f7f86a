//! Neural-network ops of transformer blocks: `layernorm`, `rmsnorm`, `rope`, `embedding` and
//! `cross_entropy`. The checks shared with their backward helpers (in `grad.rs`) live here.

use fbc_ir::{Arity, ElemType, FbClass, OpDef, OpError, OpTraits, OpView, TensorType, Type};

use super::common::{tensor_type, Ctx};
use super::{AXIS_LAST, DEFAULT_EPS, EPS};

pub static OPS: &[OpDef] = &[
    OpDef {
        name: "tensor.layernorm",
        summary: "layer normalization along one axis, with scale and shift",
        doc: "`y = (x - mean) / √(var + eps) · gamma + beta`, where `mean` and the biased `var`\n\
              are taken along `axis` and `gamma`, `beta` broadcast along it.\n\
              \n\
              **Operands:** `x` — a float tensor of rank ≥ 1; `gamma`, `beta` — tensors of shape\n\
              `[x.shape[axis]]` and `x`'s element type.\n\
              \n\
              **Result:** a tensor of `x`'s type.\n\
              \n\
              **Attributes:** `axis` (integer, default `-1`); `eps` (float, default `1.0e-5`).\n\
              \n\
              **Verifier:** `x` is a float tensor; `axis` is in `[-rank, rank)`; `gamma` and `beta`\n\
              are exactly `tensor<{x.shape[axis]}x{elem}>`; `eps` is finite and ≥ 0.\n\
              \n\
              **FBLayout class:** FTD-D (paper Table 1): the backward needs `x` (or the normalized\n\
              `x̂`) and `gamma`, and computes `dgamma`, `dbeta` by reducing over every axis but\n\
              `axis`, where the forward reduces along `axis`.",
        operands: Arity::Exactly(3),
        results: Arity::Exactly(1),
        attrs: &[AXIS_LAST, EPS],
        traits: OpTraits::PURE,
        class: Some(FbClass::FtdD),
        infer: infer_layernorm,
    },
    OpDef {
        name: "tensor.rmsnorm",
        summary: "RMS normalization over the last axis, with scale",
        doc: "`y = x / √(mean(x², last axis) + eps) · gamma`.\n\
              \n\
              **Operands:** `x` — a float tensor of rank ≥ 1, `[..., D]`; `gamma` — `[D]`, `x`'s\n\
              element type.\n\
              \n\
              **Result:** a tensor of `x`'s type.\n\
              \n\
              **Attributes:** `eps` (float, default `1.0e-5`), finite and ≥ 0.\n\
              \n\
              **Verifier:** `x` is a float tensor of rank ≥ 1; `gamma` is exactly\n\
              `tensor<Dx{elem}>`; `eps` is finite and ≥ 0.\n\
              \n\
              **FBLayout class:** FTD-D, like LayerNorm in Table 1: the backward needs `x` and\n\
              `gamma`, and `dgamma` reduces over the leading axes while the forward reduces over\n\
              the last.",
        operands: Arity::Exactly(2),
        results: Arity::Exactly(1),
        attrs: &[EPS],
        traits: OpTraits::PURE,
        class: Some(FbClass::FtdD),
        infer: infer_rmsnorm,
    },
    OpDef {
        name: "tensor.rope",
        summary: "rotary position embedding",
        doc: "`y = x · cos + rotate_half(x) · sin`, where\n\
              `rotate_half(x) = concat(-x[..., D/2:], x[..., :D/2])` along the last axis and `cos`,\n\
              `sin` broadcast over the leading dimensions of `x`.\n\
              \n\
              **Operands:** `x` — a float tensor `[..., S, D]` of rank ≥ 2; `cos`, `sin` — `[S, D]`,\n\
              `x`'s element type.\n\
              \n\
              **Result:** a tensor of `x`'s type.\n\
              \n\
              **Verifier:** `x` is a float tensor of rank ≥ 2 whose last dimension `D` is even;\n\
              `cos` and `sin` are exactly `tensor<SxDx{elem}>`.\n\
              \n\
              **FBLayout class:** FTI-C: the backward is `tensor.rope_grad`, the same rotation with\n\
              `-sin`; it needs only `cos`/`sin` (constants of the model, not forward activations)\n\
              and reads `dy` with the forward's access pattern.",
        operands: Arity::Exactly(3),
        results: Arity::Exactly(1),
        attrs: &[],
        traits: OpTraits::PURE,
        class: Some(FbClass::FtiC),
        infer: infer_rope,
    },
    OpDef {
        name: "tensor.embedding",
        summary: "gathers rows of a table by index",
        doc: "`out[i..., d] = table[ids[i...], d]`.\n\
              \n\
              **Operands:** `table` — a float tensor `[V, D]`; `ids` — an `i32` tensor of any shape.\n\
              \n\
              **Result:** `[ids.shape..., D]` with `table`'s element type.\n\
              \n\
              **Verifier:** `table` is a float tensor of rank 2; `ids` has element type `i32`.\n\
              Index values are not checked (they are data); out-of-range ids are undefined.\n\
              \n\
              **FBLayout class:** FTD-D: the backward (`tensor.embedding_grad`) needs the forward\n\
              `ids` and scatter-adds rows of `dy` into `[V, D]`, an access pattern unlike the\n\
              forward's gather.",
        operands: Arity::Exactly(2),
        results: Arity::Exactly(1),
        attrs: &[],
        traits: OpTraits::PURE,
        class: Some(FbClass::FtdD),
        infer: infer_embedding,
    },
    OpDef {
        name: "tensor.cross_entropy",
        summary: "mean softmax cross-entropy of logits against integer labels",
        doc: "`loss = -(1/N) Σ_n log softmax(logits[n, :])[labels[n]]`.\n\
              \n\
              **Operands:** `logits` — a float tensor `[N, C]`; `labels` — an `i32` tensor `[N]`.\n\
              \n\
              **Result:** a rank-0 tensor of `logits`' element type (`tensor<f32>` for f32 logits).\n\
              \n\
              **Verifier:** `logits` is a float tensor of rank 2; `labels` is exactly\n\
              `tensor<Nxi32>`. Label values are not checked (they are data).\n\
              \n\
              **FBLayout class:** FTD-C: the backward `(softmax(logits) - onehot(labels)) · dloss /\n\
              N` (`tensor.cross_entropy_grad`) needs the forward `logits` and `labels`, and reads\n\
              `logits` row by row as the forward does.",
        operands: Arity::Exactly(2),
        results: Arity::Exactly(1),
        attrs: &[],
        traits: OpTraits::PURE,
        class: Some(FbClass::FtdC),
        infer: infer_cross_entropy,
    },
];

/// Checks `x` (operand 0) and its per-feature parameters (operands `params`, `[x.shape[axis]]`)
/// of a layer norm, and its `axis` and `eps`; returns `x`.
pub(crate) fn check_layernorm<'a>(
    cx: &Ctx<'_, 'a>,
    params: &[usize],
) -> Result<&'a TensorType, OpError> {
    let x = cx.float_tensor(0)?;
    let axis = cx.int("axis", -1)?;
    let k = cx.axis("axis", "`axis`", axis, x, 0)?;
    let want = tensor_type(&[x.shape[k]], x.elem);
    for &g in params {
        let t = cx.tensor(g)?;
        let why = format!(
            "{} has shape [x.shape[axis]] = [{}]: `x` is {x} and `axis` is {axis}",
            cx.role(g),
            x.shape[k]
        );
        cx.expect_type(g, t, &want, why)?;
    }
    cx.eps(DEFAULT_EPS)?;
    Ok(x)
}

/// Checks `x` (operand 0, `[..., D]`) and `gamma` (operand `g`, `[D]`) of an RMS norm, and its
/// `eps`; returns `x`.
pub(crate) fn check_rmsnorm<'a>(cx: &Ctx<'_, 'a>, g: usize) -> Result<&'a TensorType, OpError> {
    let x = cx.float_tensor(0)?;
    cx.rank_at_least(0, x, 1)?;
    let d = x.shape[x.rank() - 1];
    let gamma = cx.tensor(g)?;
    cx.expect_type(
        g,
        gamma,
        &tensor_type(&[d], x.elem),
        format!("{} has shape [D] = [{d}], the last dimension of `x` ({x})", cx.role(g)),
    )?;
    cx.eps(DEFAULT_EPS)?;
    Ok(x)
}

/// Checks a rope-style op: operand 0 `[..., S, D]` with even `D`, operands 1 and 2 `[S, D]`.
pub(crate) fn check_rope<'a>(cx: &Ctx<'_, 'a>) -> Result<&'a TensorType, OpError> {
    let x = cx.float_tensor(0)?;
    cx.rank_at_least(0, x, 2)?;
    let r = x.rank();
    let (s, d) = (x.shape[r - 2], x.shape[r - 1]);
    if d % 2 != 0 {
        return Err(OpError::operand(
            0,
            format!("expected an even last dimension, found {d} — {}", cx.what(0)),
        )
        .note(format!(
            "{} is {x}; rotate_half splits the last dimension into two halves",
            cx.role(0)
        )));
    }
    let want = tensor_type(&[s, d], x.elem);
    for i in [1, 2] {
        let t = cx.tensor(i)?;
        cx.expect_type(
            i,
            t,
            &want,
            format!(
                "{} is [S, D] = [{s}, {d}], the last two dimensions of {} ({x})",
                cx.role(i),
                cx.role(0)
            ),
        )?;
    }
    Ok(x)
}

/// Checks `logits` `[N, C]` (operand 0) and `labels` `[N]` (operand 1); returns `logits`.
pub(crate) fn check_cross_entropy<'a>(cx: &Ctx<'_, 'a>) -> Result<&'a TensorType, OpError> {
    let logits = cx.float_tensor(0)?;
    cx.rank_exactly(0, logits, 2, "[N, C]")?;
    let labels = cx.i32_tensor(1)?;
    let n = logits.shape[0];
    cx.expect_type(
        1,
        labels,
        &tensor_type(&[n], ElemType::I32),
        format!("`labels` is [N] = [{n}], one label per row of `logits` ({logits})"),
    )?;
    Ok(logits)
}

fn infer_layernorm(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    let cx = Ctx::new(v, "tensor.layernorm", &["x", "gamma", "beta"], Arity::Exactly(3))?;
    let x = check_layernorm(&cx, &[1, 2])?;
    cx.done(vec![x.clone()])
}

fn infer_rmsnorm(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    let cx = Ctx::new(v, "tensor.rmsnorm", &["x", "gamma"], Arity::Exactly(2))?;
    let x = check_rmsnorm(&cx, 1)?;
    cx.done(vec![x.clone()])
}

fn infer_rope(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    let cx = Ctx::new(v, "tensor.rope", &["x", "cos", "sin"], Arity::Exactly(3))?;
    let x = check_rope(&cx)?;
    cx.done(vec![x.clone()])
}

fn infer_embedding(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    let cx = Ctx::new(v, "tensor.embedding", &["table", "ids"], Arity::Exactly(2))?;
    let table = cx.float_tensor(0)?;
    cx.rank_exactly(0, table, 2, "[V, D]")?;
    let ids = cx.i32_tensor(1)?;
    let mut shape = ids.shape.clone();
    shape.push(table.shape[1]);
    cx.done(vec![TensorType::new(shape, table.elem)])
}

fn infer_cross_entropy(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    let cx = Ctx::new(v, "tensor.cross_entropy", &["logits", "labels"], Arity::Exactly(2))?;
    let logits = check_cross_entropy(&cx)?;
    cx.done(vec![tensor_type(&[], logits.elem)])
}
