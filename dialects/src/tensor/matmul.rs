//! `tensor.matmul`: batched matrix product with NumPy-broadcast batch dimensions and optional
//! transposition of either operand's last two dimensions.

use fbc_ir::{
    Arity, AttrDef, AttrKind, FbClass, OpDef, OpError, OpTraits, OpView, TensorType, Type,
};

use super::common::{broadcast_shapes, list, Ctx};

const NAME: &str = "tensor.matmul";

pub static OPS: &[OpDef] = &[OpDef {
    name: NAME,
    summary: "batched matrix product; batch dimensions broadcast",
    doc: "`out[..., m, n] = Σ_k A[..., m, k] · B[..., k, n]` where `A = a` (or `a` with its last two\n\
          dimensions swapped when `transpose_a`) and `B = b` (likewise with `transpose_b`).\n\
          \n\
          **Operands:** `a` of shape `[..., M, K]` (`[..., K, M]` when `transpose_a`), `b` of shape\n\
          `[..., K, N]` (`[..., N, K]` when `transpose_b`); float tensors of one element type.\n\
          \n\
          **Result:** `[batch..., M, N]`, where `batch` is the NumPy broadcast of the two operands'\n\
          leading (batch) dimensions; a rank-2 operand has no batch dimensions and broadcasts.\n\
          \n\
          **Attributes:** `transpose_a`, `transpose_b` (booleans, default `false`).\n\
          \n\
          **Verifier:** both operands are float tensors of rank ≥ 2 with the same element type; the\n\
          contraction dimensions agree (`expected 2048, found 1024 — the contraction dimension of\n\
          tensor.matmul`, reported at `b`, with a note naming both shapes); the batch dimensions\n\
          broadcast; the result's element count fits in 64 bits.\n\
          \n\
          **FBLayout class:** FTD-D (paper Table 1): `dA = dOut · Bᵀ` and `dB = Aᵀ · dOut` need both\n\
          forward operands, and the backward reduces along M (for `dB`) where the forward reduces\n\
          along K, so the access patterns diverge.",
    operands: Arity::Exactly(2),
    results: Arity::Exactly(1),
    attrs: &[
        AttrDef::optional(
            "transpose_a",
            AttrKind::Bool,
            "false",
            "swap the last two dimensions of `a`",
        ),
        AttrDef::optional(
            "transpose_b",
            AttrKind::Bool,
            "false",
            "swap the last two dimensions of `b`",
        ),
    ],
    traits: OpTraits::PURE,
    class: Some(FbClass::FtdD),
    infer: infer_matmul,
}];

/// `(rows, cols)` of the last two dimensions of `t` (rank ≥ 2), swapped when `transposed`.
fn matrix(t: &TensorType, transposed: bool) -> (u64, u64) {
    let r = t.rank();
    let (x, y) = (t.shape[r - 2], t.shape[r - 1]);
    if transposed {
        (y, x)
    } else {
        (x, y)
    }
}

fn infer_matmul(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    let cx = Ctx::new(v, NAME, &["a", "b"], Arity::Exactly(2))?;
    let a = cx.float_tensor(0)?;
    let b = cx.float_tensor(1)?;
    cx.rank_at_least(0, a, 2)?;
    cx.rank_at_least(1, b, 2)?;
    cx.same_elem(1, b, 0)?;
    let ta = cx.bool("transpose_a", false)?;
    let tb = cx.bool("transpose_b", false)?;
    let (m, ka) = matrix(a, ta);
    let (kb, n) = matrix(b, tb);
    if ka != kb {
        let la = if ta { "[..., K, M] (transpose_a = true)" } else { "[..., M, K]" };
        let lb = if tb { "[..., N, K] (transpose_b = true)" } else { "[..., K, N]" };
        return Err(OpError::operand(
            1,
            format!("expected {ka}, found {kb} — the contraction dimension of {NAME}"),
        )
        .note(format!("`a` is {a}, read as {la} with K = {ka}"))
        .note(format!("`b` is {b}, read as {lb} with K = {kb}")));
    }
    let batch_a = &a.shape[..a.rank() - 2];
    let batch_b = &b.shape[..b.rank() - 2];
    let mut shape = broadcast_shapes(batch_a, batch_b).map_err(|e| {
        OpError::new(format!(
            "cannot broadcast the batch dimensions {} of {a} with {} of {b}: {e}",
            list(batch_a),
            list(batch_b)
        ))
        .note("batch dimensions (all but the last two) broadcast as NumPy does")
    })?;
    shape.push(m);
    shape.push(n);
    cx.done(vec![TensorType::new(shape, a.elem)])
}
