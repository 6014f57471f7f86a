//! Neural-network ops of transformer blocks: `layernorm`, `rmsnorm`, `rope`, `embedding`,
//! `cross_entropy`, and for inference graphs `causal_mask` and the fused `attention`. The checks
//! shared with their backward helpers (in `grad.rs`) live here.

use fbc_ir::{
    Arity, AttrDef, AttrKind, ElemType, FbClass, OpDef, OpError, OpTraits, OpView, TensorType, Type,
};

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
    OpDef {
        name: "tensor.causal_mask",
        summary: "the additive causal mask of queries at a run-time position over a KV cache",
        doc: "`out[i, j] = 0` where key position `j` may be seen from query `i` at position\n\
              `pos + i`, `-inf` elsewhere: `j ≤ pos + i`, and with a `window` `w > 0` also\n\
              `j > pos + i - w` (a sliding window of `w` positions, Gemma 2's local layers).\n\
              Added to attention scores before the softmax; built from indices, so the host passes\n\
              only the position.\n\
              \n\
              **Operands:** `pos` — a `tensor<i32>` (rank 0), read when the op runs.\n\
              \n\
              **Result:** `tensor<SxMxf32>` for `shape = [S, M]`.\n\
              \n\
              **Attributes:** `shape` (two integers ≥ 0, required); `window` (integer ≥ 0, default\n\
              0: no window).\n\
              \n\
              **Verifier:** the types above; `shape` has two entries ≥ 0; `window` ≥ 0.\n\
              \n\
              **FBLayout class:** FTI-C: it reads no tensor but a scalar, and has no gradient\n\
              (its operand is an integer).",
        operands: Arity::Exactly(1),
        results: Arity::Exactly(1),
        attrs: &[
            AttrDef::required("shape", AttrKind::IntArray, "[S, M]: queries and key positions"),
            AttrDef::optional(
                "window",
                AttrKind::Int,
                "0",
                "positions a query sees back, itself included; 0: every earlier position",
            ),
        ],
        traits: OpTraits::PURE,
        class: Some(FbClass::FtiC),
        infer: infer_causal_mask,
    },
    OpDef {
        name: "tensor.attention",
        summary: "fused scaled dot-product attention: RoPE on the queries, GQA, causal mask, soft cap",
        doc: "`out = softmax(mask(cap(scale · q' · kᵀ))) · v` per batch and head, where\n\
              `q' = rope(q, cos, sin)` with `rope = true` (else `q`), `cap(s) = c · tanh(s / c)` with\n\
              `softcap = c > 0` (else the identity), and `mask` keeps the scores of the key positions\n\
              `tensor.causal_mask` keeps (`j ≤ pos + i`, and `j > pos + i - window` with a window)\n\
              with `causal = true` and sets the others to `-inf` (without `causal` it keeps all).\n\
              Head `h` of `q` reads head `h / (H / KV)` of `k` and `v` (grouped-query attention:\n\
              the shared heads are read in place, never broadcast). What `fuse-attention` makes of\n\
              RoPE, `QKᵀ`, scale, soft cap, mask, softmax and `PV` in an inference graph.\n\
              \n\
              **Operands:** `q` — a float tensor `[B, H, S, D]`; `k`, `v` — `[B, KV, M, D]` of\n\
              `q`'s element type, `H` a multiple of `KV`; then with `rope` `cos`, `sin` — `[S, D]`\n\
              (`D` even); then with `causal` `pos` — a `tensor<i32>` (rank 0), the position of\n\
              query 0.\n\
              \n\
              **Result:** `q`'s type.\n\
              \n\
              **Attributes:** `scale` (float, required, finite); `rope`, `causal` (booleans, default\n\
              false); `window` (integer ≥ 0, default 0; only with `causal`); `softcap` (float ≥ 0,\n\
              default 0: none).\n\
              \n\
              **Verifier:** the operand count matches `rope` and `causal` (3 + 2 + 1); the types\n\
              above; the attribute ranges.\n\
              \n\
              **Lowering:** one launch of the memory dialect's attention kind: on OpenCL one kernel\n\
              with online softmax over tiles of keys, reading only the key positions the mask\n\
              keeps; the reference executor and the CPU JIT run its three-step definition.\n\
              \n\
              **FBLayout class:** FTD-D, as the unfused graph it replaces (softmax and the two\n\
              products); it has no gradient rule: it serves inference graphs, and `fuse-attention`\n\
              leaves attention whose probabilities a backward reads.",
        operands: Arity::Between(3, 6),
        results: Arity::Exactly(1),
        attrs: &[
            AttrDef::required("scale", AttrKind::Float, "the factor of the scores"),
            AttrDef::optional("rope", AttrKind::Bool, "false", "RoPE on `q` with `cos`, `sin`"),
            AttrDef::optional("causal", AttrKind::Bool, "false", "mask keys after `pos + i`"),
            AttrDef::optional(
                "window",
                AttrKind::Int,
                "0",
                "with `causal`: positions a query sees back, itself included; 0: all",
            ),
            AttrDef::optional("softcap", AttrKind::Float, "0.0", "`c · tanh(s / c)`; 0: none"),
        ],
        traits: OpTraits::PURE,
        class: Some(FbClass::FtdD),
        infer: infer_attention,
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

fn infer_causal_mask(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    let cx = Ctx::new(v, "tensor.causal_mask", &["pos"], Arity::Exactly(1))?;
    let pos = cx.i32_tensor(0)?;
    cx.rank_exactly(0, pos, 0, "a scalar `tensor<i32>`")?;
    let shape = cx.req_ints("shape")?;
    let dims = cx.dims("shape", &shape)?;
    if dims.len() != 2 {
        return Err(OpError::attr(
            "shape",
            format!("expected two entries [S, M], found {shape:?} — `shape` of tensor.causal_mask"),
        ));
    }
    let window = cx.int("window", 0)?;
    if window < 0 {
        return Err(OpError::attr(
            "window",
            format!("expected an integer ≥ 0, found {window} — `window` of tensor.causal_mask"),
        ));
    }
    cx.done(vec![tensor_type(&dims, ElemType::F32)])
}

/// The operand roles of `tensor.attention` by `(rope, causal)`.
fn attention_roles(rope: bool, causal: bool) -> &'static [&'static str] {
    match (rope, causal) {
        (false, false) => &["q", "k", "v"],
        (false, true) => &["q", "k", "v", "pos"],
        (true, false) => &["q", "k", "v", "cos", "sin"],
        (true, true) => &["q", "k", "v", "cos", "sin", "pos"],
    }
}

fn infer_attention(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    const NAME: &str = "tensor.attention";
    let flag = |name: &str| v.attr(name).and_then(fbc_ir::Attr::as_bool).unwrap_or(false);
    let (rope, causal) = (flag("rope"), flag("causal"));
    let roles = attention_roles(rope, causal);
    let n = roles.len();
    let cx = Ctx::new(v, NAME, roles, Arity::Exactly(n)).map_err(|e| {
        e.note(format!(
            "with rope = {rope} and causal = {causal} the operands are {}",
            roles.join(", ")
        ))
    })?;
    let q = cx.float_tensor(0)?;
    cx.rank_exactly(0, q, 4, "[B, H, S, D]")?;
    let (b, h, s, d) = (q.shape[0], q.shape[1], q.shape[2], q.shape[3]);
    let k = cx.tensor(1)?;
    cx.same_elem(1, k, 0)?;
    cx.rank_exactly(1, k, 4, "[B, KV, M, D]")?;
    let kv = k.shape[1];
    if k.shape[0] != b || k.shape[3] != d {
        return Err(OpError::operand(
            1,
            format!("expected [{b}, KV, M, {d}], found {k} — {}", cx.what(1)),
        )
        .note(format!("`k` has `q`'s batch and head size: `q` is {q}")));
    }
    if kv == 0 || h % kv != 0 {
        return Err(OpError::operand(
            1,
            format!("{kv} key heads do not divide the {h} query heads — {}", cx.what(1)),
        )
        .note("each group of H / KV query heads shares one key and value head"));
    }
    let vt = cx.tensor(2)?;
    cx.expect_type(2, vt, k, format!("`v` has `k`'s type ({k})"))?;
    if rope {
        if d % 2 != 0 {
            return Err(OpError::operand(
                0,
                format!("expected an even last dimension, found {d} — {}", cx.what(0)),
            )
            .note("with rope = true, rotate_half splits the head dimension into two halves"));
        }
        let want = tensor_type(&[s, d], q.elem);
        for i in [3, 4] {
            let t = cx.tensor(i)?;
            cx.expect_type(i, t, &want, format!("{} is [S, D] = [{s}, {d}]", cx.role(i)))?;
        }
    }
    if causal {
        let pos = cx.i32_tensor(n - 1)?;
        cx.rank_exactly(n - 1, pos, 0, "a scalar `tensor<i32>`")?;
    }
    let scale = cx.req_float("scale")?;
    if !scale.is_finite() {
        return Err(OpError::attr(
            "scale",
            format!("expected a finite float, found {scale} — `scale` of {NAME}"),
        ));
    }
    let softcap = cx.float("softcap", 0.0)?;
    if !(softcap.is_finite() && softcap >= 0.0) {
        return Err(OpError::attr(
            "softcap",
            format!("expected a finite float ≥ 0, found {softcap} — `softcap` of {NAME}"),
        ));
    }
    let window = cx.int("window", 0)?;
    if window < 0 || (window > 0 && !causal) {
        return Err(OpError::attr(
            "window",
            format!("expected 0, or an integer ≥ 1 with causal = true, found {window} — `window` of {NAME}"),
        ));
    }
    cx.done(vec![q.clone()])
}
