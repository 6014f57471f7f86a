//! Backward helper ops that autodiff emits: the adjoints of the forward ops whose gradient is not
//! a composition of other tensor ops (or is cheaper fused), plus `unbroadcast`, `slice_grad` and
//! the `ge` mask. Each doc states its math exactly; `dy` is always the incoming gradient.

use fbc_ir::{
    Arity, AttrDef, AttrKind, FbClass, OpDef, OpError, OpTraits, OpView, TensorType, Type,
};

use super::common::{broadcasts_to, list, tensor_type, Ctx};
use super::elementwise::binary_float;
use super::nn::{check_cross_entropy, check_layernorm, check_rmsnorm, check_rope};
use super::{APPROXIMATE, AXIS_LAST, EPS};

/// The verifier rules of the elementwise gradient ops `*_grad(v, dy)`, for their documentation.
macro_rules! pointwise_grad_rules {
    () => {
        "**Result:** a tensor of the first operand's type.\n\
         \n\
         **Verifier:** the first operand is a float tensor; `dy` has exactly its type (no\n\
         broadcasting: gradients have the shape of what they differentiate).\n\
         \n"
    };
}

const fn pointwise_grad(
    name: &'static str,
    summary: &'static str,
    doc: &'static str,
    attrs: &'static [AttrDef],
    infer: fbc_ir::registry::InferFn,
) -> OpDef {
    OpDef {
        name,
        summary,
        doc,
        operands: Arity::Exactly(2),
        results: Arity::Exactly(1),
        attrs,
        traits: OpTraits::ELEMENTWISE,
        class: Some(FbClass::FtdC),
        infer,
    }
}

pub static OPS: &[OpDef] = &[
    OpDef {
        name: "tensor.softmax_grad",
        summary: "adjoint of softmax: y·(dy − Σ_axis dy·y)",
        doc: "`dx = y · (dy - Σ_axis (dy · y))`, the sum kept as a size-1 axis and broadcast, where\n\
              `y = softmax(x, axis)` is the forward result.\n\
              \n\
              **Operands:** `y` — the forward softmax result, a float tensor; `dy` — the gradient of\n\
              `y`, of `y`'s type.\n\
              \n\
              **Result:** `dx`, a tensor of `y`'s type.\n\
              \n\
              **Attributes:** `axis` (integer, default `-1`): the forward softmax's axis.\n\
              \n\
              **Verifier:** `y` is a float tensor; `dy` has exactly `y`'s type; `axis` is in range.\n\
              \n\
              **FBLayout class:** FTD-C: it reads the forward `y`, along the forward's axis.",
        operands: Arity::Exactly(2),
        results: Arity::Exactly(1),
        attrs: &[AXIS_LAST],
        traits: OpTraits::PURE,
        class: Some(FbClass::FtdC),
        infer: infer_softmax_grad,
    },
    OpDef {
        name: "tensor.layernorm_grad",
        summary: "adjoint of layernorm: (dx, dgamma, dbeta)",
        doc: "With `μ = mean_axis(x)`, `σ = √(var_axis(x) + eps)` (biased variance), `x̂ = (x - μ)/σ`,\n\
              `g = dy · gamma` (gamma broadcast along `axis`) and `n = x.shape[axis]`:\n\
              - `dx = (g - mean_axis(g) - x̂ · mean_axis(g · x̂)) / σ`;\n\
              - `dgamma = Σ_{all axes but axis} dy · x̂`;\n\
              - `dbeta = Σ_{all axes but axis} dy`.\n\
              \n\
              **Operands:** `x` — the forward input, a float tensor; `gamma` —\n\
              `[x.shape[axis]]`; `dy` — the gradient of the output, of `x`'s type.\n\
              \n\
              **Results:** `dx` (`x`'s type), `dgamma` and `dbeta` (`gamma`'s type).\n\
              \n\
              **Attributes:** `axis` (integer, default `-1`), `eps` (float, default `1.0e-5`): the\n\
              forward op's.\n\
              \n\
              **Verifier:** as `tensor.layernorm` for `x`, `gamma`, `axis` and `eps`; `dy` has\n\
              exactly `x`'s type.\n\
              \n\
              **FBLayout class:** FTD-D: it reads the forward `x` and `gamma`, and reduces along\n\
              `axis` for `dx` but across the other axes for `dgamma`/`dbeta`.",
        operands: Arity::Exactly(3),
        results: Arity::Exactly(3),
        attrs: &[AXIS_LAST, EPS],
        traits: OpTraits::PURE,
        class: Some(FbClass::FtdD),
        infer: infer_layernorm_grad,
    },
    OpDef {
        name: "tensor.rmsnorm_grad",
        summary: "adjoint of rmsnorm: (dx, dgamma)",
        doc: "With `r = 1/√(mean_last(x²) + eps)`, `x̂ = x · r`, `g = dy · gamma` and `D` the last\n\
              dimension:\n\
              - `dx = r · (g - x̂ · mean_last(g · x̂))`;\n\
              - `dgamma = Σ_{all axes but the last} dy · x̂`.\n\
              \n\
              **Operands:** `x` — the forward input `[..., D]`, a float tensor; `gamma` — `[D]`;\n\
              `dy` — the gradient of the output, of `x`'s type.\n\
              \n\
              **Results:** `dx` (`x`'s type) and `dgamma` (`gamma`'s type).\n\
              \n\
              **Attributes:** `eps` (float, default `1.0e-5`): the forward op's.\n\
              \n\
              **Verifier:** as `tensor.rmsnorm` for `x`, `gamma` and `eps`; `dy` has exactly `x`'s\n\
              type.\n\
              \n\
              **FBLayout class:** FTD-D: reads the forward `x` and `gamma`; `dgamma` reduces across\n\
              the leading axes where the forward reduces along the last.",
        operands: Arity::Exactly(3),
        results: Arity::Exactly(2),
        attrs: &[EPS],
        traits: OpTraits::PURE,
        class: Some(FbClass::FtdD),
        infer: infer_rmsnorm_grad,
    },
    pointwise_grad(
        "tensor.gelu_grad",
        "adjoint of gelu: dy·gelu'(x)",
        concat!(
            "`dx = dy · gelu'(x)`, elementwise. For `approximate = \"none\"`:\n\
             `gelu'(x) = Φ(x) + x · φ(x)` with `Φ(x) = (1 + erf(x/√2))/2`, `φ(x) = exp(-x²/2)/√(2π)`.\n\
             For `approximate = \"tanh\"`, with `u = √(2/π)·(x + 0.044715·x³)` and `t = tanh(u)`:\n\
             `gelu'(x) = (1 + t)/2 + x/2 · (1 - t²) · √(2/π) · (1 + 3·0.044715·x²)`.\n\n\
             **Operands:** `x` — the forward input; `dy` — the gradient of the output.\n\n",
            pointwise_grad_rules!(),
            "**Attributes:** `approximate` (`\"none\"` or `\"tanh\"`, default `\"none\"`): the \
             forward op's.\n\n\
             **FBLayout class:** FTD-C: reads the forward `x` elementwise."
        ),
        &[APPROXIMATE],
        infer_gelu_grad,
    ),
    pointwise_grad(
        "tensor.silu_grad",
        "adjoint of silu: dy·s·(1 + x·(1 − s)), s = sigmoid(x)",
        concat!(
            "`dx = dy · s · (1 + x · (1 - s))` with `s = sigmoid(x)`, elementwise.\n\n\
             **Operands:** `x` — the forward input; `dy` — the gradient of the output.\n\n",
            pointwise_grad_rules!(),
            "**FBLayout class:** FTD-C: reads the forward `x` elementwise."
        ),
        &[],
        infer_silu_grad,
    ),
    pointwise_grad(
        "tensor.sigmoid_grad",
        "adjoint of sigmoid: dy·y·(1 − y)",
        concat!(
            "`dx = dy · y · (1 - y)`, elementwise, where `y = sigmoid(x)` is the forward result.\n\n\
             **Operands:** `y` — the forward result; `dy` — the gradient of `y`.\n\n",
            pointwise_grad_rules!(),
            "**FBLayout class:** FTD-C: reads the forward `y` elementwise."
        ),
        &[],
        infer_sigmoid_grad,
    ),
    pointwise_grad(
        "tensor.tanh_grad",
        "adjoint of tanh: dy·(1 − y²)",
        concat!(
            "`dx = dy · (1 - y²)`, elementwise, where `y = tanh(x)` is the forward result.\n\n\
             **Operands:** `y` — the forward result; `dy` — the gradient of `y`.\n\n",
            pointwise_grad_rules!(),
            "**FBLayout class:** FTD-C: reads the forward `y` elementwise."
        ),
        &[],
        infer_tanh_grad,
    ),
    pointwise_grad(
        "tensor.relu_grad",
        "adjoint of relu: dy where x > 0, else 0",
        concat!(
            "`dx = dy · 1[x > 0]`, elementwise (the gradient at `x = 0` is 0).\n\n\
             **Operands:** `x` — the forward input; `dy` — the gradient of the output.\n\n",
            pointwise_grad_rules!(),
            "**FBLayout class:** FTD-C: reads the forward `x` elementwise (paper Sec. 4.1's \
             ReLU example)."
        ),
        &[],
        infer_relu_grad,
    ),
    OpDef {
        name: "tensor.rope_grad",
        summary: "adjoint of rope: dy·cos − rotate_half(dy·sin)",
        doc: "The transpose of the linear map `tensor.rope`: with `h = D/2`,\n\
              `dx[..., :h] = dy[..., :h] · cos[:, :h] + dy[..., h:] · sin[:, h:]` and\n\
              `dx[..., h:] = dy[..., h:] · cos[:, h:] - dy[..., :h] · sin[:, :h]`, i.e.\n\
              `dx = dy · cos - rotate_half(dy · sin)`, which for the usual tables (whose two halves\n\
              are equal) is `rope(dy, cos, -sin)`.\n\
              \n\
              **Operands:** `dy` — `[..., S, D]`, a float tensor with even `D`; `cos`, `sin` —\n\
              `[S, D]`, as given to the forward op.\n\
              \n\
              **Result:** `dx`, a tensor of `dy`'s type.\n\
              \n\
              **Verifier:** as `tensor.rope`, with `dy` in place of `x`.\n\
              \n\
              **FBLayout class:** FTI-C: it needs no forward activation, only the position tables,\n\
              and reads `dy` with the forward's pattern.",
        operands: Arity::Exactly(3),
        results: Arity::Exactly(1),
        attrs: &[],
        traits: OpTraits::PURE,
        class: Some(FbClass::FtiC),
        infer: infer_rope_grad,
    },
    OpDef {
        name: "tensor.cross_entropy_grad",
        summary: "adjoint of cross_entropy: (softmax(logits) − onehot(labels))·dloss/N",
        doc: "`dlogits[n, c] = (softmax(logits[n, :])[c] - 1[c = labels[n]]) · dloss / N`.\n\
              \n\
              **Operands:** `logits` — the forward `[N, C]` float tensor; `labels` — `[N]` i32;\n\
              `dloss` — the gradient of the loss, a rank-0 tensor of `logits`' element type.\n\
              \n\
              **Result:** `dlogits`, a tensor of `logits`' type.\n\
              \n\
              **Verifier:** as `tensor.cross_entropy` for `logits` and `labels`; `dloss` is exactly\n\
              `tensor<elem>` (rank 0).\n\
              \n\
              **FBLayout class:** FTD-C: it reads the forward `logits` row by row, as the forward.",
        operands: Arity::Exactly(3),
        results: Arity::Exactly(1),
        attrs: &[],
        traits: OpTraits::PURE,
        class: Some(FbClass::FtdC),
        infer: infer_cross_entropy_grad,
    },
    OpDef {
        name: "tensor.embedding_grad",
        summary: "adjoint of embedding: scatter-add of dy rows into [vocab, D]",
        doc: "`dtable = zeros([vocab, D]); dtable[ids[i...], :] += dy[i..., :]` for every index\n\
              tuple `i...` of `ids` (repeated ids accumulate).\n\
              \n\
              **Operands:** `ids` — the forward `i32` indices, any shape; `dy` — the gradient of the\n\
              output, a float tensor `[ids.shape..., D]`.\n\
              \n\
              **Result:** `dtable`, `tensor<vocab x D x elem>` with `dy`'s element type.\n\
              \n\
              **Attributes:** `vocab` (integer, required, ≥ 1): the table's first dimension `V`.\n\
              \n\
              **Verifier:** `ids` has element type i32; `dy` is a float tensor of rank\n\
              `ids.rank + 1` whose leading dimensions equal `ids`' shape; `vocab ≥ 1`.\n\
              \n\
              **FBLayout class:** FTD-D: it needs the forward `ids`, and scatters where the forward\n\
              gathers.",
        operands: Arity::Exactly(2),
        results: Arity::Exactly(1),
        attrs: &[AttrDef::required("vocab", AttrKind::Int, "the number of table rows, ≥ 1")],
        traits: OpTraits::PURE,
        class: Some(FbClass::FtdD),
        infer: infer_embedding_grad,
    },
    OpDef {
        name: "tensor.unbroadcast",
        summary: "sums a broadcast tensor back to the shape it was broadcast from",
        doc: "The adjoint of NumPy broadcasting: sums `x` over its leading dimensions that `shape`\n\
              lacks, and over every dimension where `shape` has 1 and `x` does not (keeping it as\n\
              size 1), giving a tensor of shape `shape`.\n\
              \n\
              **Operand:** `x` — a float tensor whose shape is a NumPy broadcast of `shape`.\n\
              \n\
              **Result:** `tensor<shape x elem>`.\n\
              \n\
              **Attributes:** `shape` (integer array, required): dimensions ≥ 0.\n\
              \n\
              **Verifier:** `x` is a float tensor; every entry of `shape` is ≥ 0; `shape` has at\n\
              most `x`'s rank; each entry of `shape` is 1 or equals the aligned dimension of `x`.\n\
              \n\
              **FBLayout class:** FTI-D: a reduction that needs no forward tensor and reads with\n\
              a pattern unlike the broadcast it undoes.",
        operands: Arity::Exactly(1),
        results: Arity::Exactly(1),
        attrs: &[AttrDef::required("shape", AttrKind::IntArray, "the shape to reduce to")],
        traits: OpTraits::PURE,
        class: Some(FbClass::FtiD),
        infer: infer_unbroadcast,
    },
    OpDef {
        name: "tensor.slice_grad",
        summary: "adjoint of slice: zeros of `shape` with dy placed at `start`",
        doc: "`dx = zeros(shape); dx[start : start + dy.shape] = dy` (per axis).\n\
              \n\
              **Operand:** `dy` — the gradient of the slice, a float tensor.\n\
              \n\
              **Result:** `tensor<shape x elem>` with `dy`'s element type.\n\
              \n\
              **Attributes:** `shape` (integer array, required): the forward input's shape;\n\
              `start` (integer array, required): the forward slice's start.\n\
              \n\
              **Verifier:** `dy` is a float tensor; `shape` and `start` have exactly `dy`'s rank\n\
              entries; every entry of `shape` is ≥ 0; per axis `0 ≤ start` and\n\
              `start + dy.shape[axis] ≤ shape[axis]`.\n\
              \n\
              **FBLayout class:** FTI-D: needs no forward tensor; writes a sub-box of a larger\n\
              tensor, unlike the forward's read.",
        operands: Arity::Exactly(1),
        results: Arity::Exactly(1),
        attrs: &[
            AttrDef::required("shape", AttrKind::IntArray, "the shape of the forward input"),
            AttrDef::required("start", AttrKind::IntArray, "the start of the forward slice"),
        ],
        traits: OpTraits::PURE,
        class: Some(FbClass::FtiD),
        infer: infer_slice_grad,
    },
    OpDef {
        name: "tensor.ge",
        summary: "elementwise a ≥ b as 1.0 or 0.0 (mask for max/min gradients)",
        doc: "`out = 1.0 where a ≥ b, else 0.0`, elementwise after NumPy broadcasting, in the\n\
              operands' float type (NaN compares false, giving 0.0). Autodiff multiplies it into\n\
              the gradients of `tensor.max` and `tensor.min`.\n\
              \n\
              **Operands:** `a`, `b` — float tensors of the same element type.\n\
              \n\
              **Result:** the broadcast shape, with the operands' element type.\n\
              \n\
              **Verifier:** as `tensor.add`: float tensors, equal element types, broadcastable\n\
              shapes.\n\
              \n\
              **FBLayout class:** FTD-C: it exists to read forward tensors (the operands of\n\
              `max`/`min`) in the backward, with the forward's elementwise access.",
        operands: Arity::Exactly(2),
        results: Arity::Exactly(1),
        attrs: &[],
        traits: OpTraits::ELEMENTWISE,
        class: Some(FbClass::FtdC),
        infer: infer_ge,
    },
];

fn infer_softmax_grad(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    let cx = Ctx::new(v, "tensor.softmax_grad", &["y", "dy"], Arity::Exactly(2))?;
    let y = cx.float_tensor(0)?;
    let dy = cx.tensor(1)?;
    cx.same_type(1, dy, 0)?;
    let axis = cx.int("axis", -1)?;
    cx.axis("axis", "`axis`", axis, y, 0)?;
    cx.done(vec![y.clone()])
}

fn infer_layernorm_grad(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    let cx = Ctx::new(v, "tensor.layernorm_grad", &["x", "gamma", "dy"], Arity::Exactly(3))?;
    let x = check_layernorm(&cx, &[1])?;
    let gamma = cx.tensor(1)?;
    let dy = cx.tensor(2)?;
    cx.same_type(2, dy, 0)?;
    cx.done(vec![x.clone(), gamma.clone(), gamma.clone()])
}

fn infer_rmsnorm_grad(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    let cx = Ctx::new(v, "tensor.rmsnorm_grad", &["x", "gamma", "dy"], Arity::Exactly(3))?;
    let x = check_rmsnorm(&cx, 1)?;
    let gamma = cx.tensor(1)?;
    let dy = cx.tensor(2)?;
    cx.same_type(2, dy, 0)?;
    cx.done(vec![x.clone(), gamma.clone()])
}

/// Checks `(v, dy)` of an elementwise gradient op: `v` a float tensor, `dy` of its type.
fn pointwise(
    v: &OpView<'_>,
    name: &'static str,
    roles: &'static [&'static str],
) -> Result<Vec<Type>, OpError> {
    let cx = Ctx::new(v, name, roles, Arity::Exactly(2))?;
    let x = cx.float_tensor(0)?;
    let dy = cx.tensor(1)?;
    cx.same_type(1, dy, 0)?;
    if name == "tensor.gelu_grad" {
        cx.str("approximate", APPROXIMATE.kind, "none")?;
    }
    cx.done(vec![x.clone()])
}

fn infer_gelu_grad(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    pointwise(v, "tensor.gelu_grad", &["x", "dy"])
}

fn infer_silu_grad(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    pointwise(v, "tensor.silu_grad", &["x", "dy"])
}

fn infer_sigmoid_grad(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    pointwise(v, "tensor.sigmoid_grad", &["y", "dy"])
}

fn infer_tanh_grad(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    pointwise(v, "tensor.tanh_grad", &["y", "dy"])
}

fn infer_relu_grad(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    pointwise(v, "tensor.relu_grad", &["x", "dy"])
}

fn infer_rope_grad(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    let cx = Ctx::new(v, "tensor.rope_grad", &["dy", "cos", "sin"], Arity::Exactly(3))?;
    let dy = check_rope(&cx)?;
    cx.done(vec![dy.clone()])
}

fn infer_cross_entropy_grad(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    let cx = Ctx::new(
        v,
        "tensor.cross_entropy_grad",
        &["logits", "labels", "dloss"],
        Arity::Exactly(3),
    )?;
    let logits = check_cross_entropy(&cx)?;
    let dloss = cx.tensor(2)?;
    cx.expect_type(
        2,
        dloss,
        &tensor_type(&[], logits.elem),
        format!("`dloss` is the gradient of the scalar loss, rank 0 with the element type of `logits` ({logits})"),
    )?;
    cx.done(vec![logits.clone()])
}

fn infer_embedding_grad(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    const NAME: &str = "tensor.embedding_grad";
    let cx = Ctx::new(v, NAME, &["ids", "dy"], Arity::Exactly(2))?;
    let ids = cx.i32_tensor(0)?;
    let dy = cx.float_tensor(1)?;
    let r = ids.rank() + 1;
    cx.rank_exactly(1, dy, r, &format!("[ids.shape..., D] for `ids` {ids}"))?;
    for (j, (&a, &b)) in ids.shape.iter().zip(&dy.shape).enumerate() {
        if a != b {
            return Err(OpError::operand(
                1,
                format!("expected {a}, found {b} — dimension {j} of {}", cx.what(1)),
            )
            .note(format!("`dy` is [ids.shape..., D]: `ids` is {ids} and `dy` is {dy}")));
        }
    }
    let vocab = cx.req_int("vocab")?;
    let Some(vocab) = u64::try_from(vocab).ok().filter(|&n| n >= 1) else {
        return Err(OpError::attr(
            "vocab",
            format!("expected a vocabulary size ≥ 1, found {vocab} — `vocab` of {NAME}"),
        ));
    };
    cx.done(vec![tensor_type(&[vocab, dy.shape[r - 1]], dy.elem)])
}

fn infer_unbroadcast(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    const NAME: &str = "tensor.unbroadcast";
    let cx = Ctx::new(v, NAME, &["x"], Arity::Exactly(1))?;
    let x = cx.float_tensor(0)?;
    let raw = cx.req_ints("shape")?;
    let shape = cx.dims("shape", &raw)?;
    match broadcasts_to(&shape, &x.shape) {
        Ok(()) => cx.done(vec![TensorType::new(shape, x.elem)]),
        Err(None) => Err(OpError::attr(
            "shape",
            format!(
                "expected at most {} dimensions, found {} — `shape` {} of {NAME}",
                x.rank(),
                shape.len(),
                list(&raw)
            ),
        )
        .note(format!("`x` ({x}) must be a NumPy broadcast of `shape`"))),
        Err(Some(e)) => Err(OpError::attr(
            "shape",
            format!("cannot broadcast {} to {x}: {e} — `shape` of {NAME}", list(&raw)),
        )
        .note(format!("`x` ({x}) must be a NumPy broadcast of `shape`"))),
    }
}

fn infer_slice_grad(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    const NAME: &str = "tensor.slice_grad";
    let cx = Ctx::new(v, NAME, &["dy"], Arity::Exactly(1))?;
    let dy = cx.float_tensor(0)?;
    let raw = cx.req_ints("shape")?;
    let start = cx.req_ints("start")?;
    let r = dy.rank();
    for (attr, vals) in [("shape", &raw), ("start", &start)] {
        if vals.len() != r {
            return Err(OpError::attr(
                attr,
                format!("expected {r} entries, found {} — `{attr}` of {NAME}", vals.len()),
            )
            .note(format!("`{attr}` has one entry per axis of `dy` ({dy})")));
        }
    }
    let shape = cx.dims("shape", &raw)?;
    for k in 0..r {
        let (s, n, d) = (start[k], dy.shape[k], shape[k]);
        let fits = u64::try_from(s).ok().and_then(|s| s.checked_add(n)).is_some_and(|e| e <= d);
        if !fits {
            let hi = d.saturating_sub(n);
            let msg = if n > d {
                format!("expected at least {n}, found {d} — element {k} of `shape` of {NAME}")
            } else {
                format!(
                    "expected a start from 0 to {hi}, found {s} — element {k} of `start` of {NAME}"
                )
            };
            let attr = if n > d { "shape" } else { "start" };
            return Err(OpError::attr(attr, msg).note(format!(
                "axis {k} of `dy` ({dy}) has size {n}; it must fit inside `shape` {} at `start` {}",
                list(&raw),
                list(&start)
            )));
        }
    }
    cx.done(vec![TensorType::new(shape, dy.elem)])
}

fn infer_ge(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    binary_float(v, "tensor.ge")
}
