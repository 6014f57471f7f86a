//! Weight-only quantisation: `tensor.dequantize`, the f32 weight a packed INT8 or INT4 tensor
//! and its per-group scales stand for (the storage of `fbc pack`'s `.fbw` files, see
//! `docs/weights.md`).

use fbc_ir::{Arity, AttrDef, AttrKind, ElemType, FbClass, OpDef, OpError, OpTraits, OpView, Type};

use super::common::{tensor_type, Ctx};

/// The quantisation schemes `tensor.dequantize` reads.
pub const SCHEMES: &[&str] = &["int8", "int4"];

pub static OPS: &[OpDef] = &[OpDef {
    name: "tensor.dequantize",
    summary: "the f32 weight of packed INT8/INT4 values and their per-group scales",
    doc: "`w[..., k] = q(..., k) · scales[..., k / group]` in f32, where `q(..., k)` is value `k` \
          of a row of packed integers: the signed byte `packed[..., k]` (`int8`), or the nibble \
          of byte `packed[..., k / 2]` (the low nibble for even `k`, the high one for odd `k`) \
          minus 8 (`int4`). Symmetric weight-only quantisation with one scale per group of \
          `group` consecutive values of a row (the last axis; a row's last group may be shorter; \
          `group = cols` is one scale per row, i.e. per output channel of a PyTorch `[out, in]` \
          weight). This is the layout of an INT8/INT4 tensor of a `.fbw` file \
          (`docs/weights.md`), so a run feeds a file's tiles and scales as they are stored.\n\
          \n\
          **Operands:** `packed` — an `i8` tensor `[..., B]`, the packed rows (B = `cols` for \
          `int8`, ⌈`cols`/2⌉ for `int4`); `scales` — an `f32` tensor `[..., ⌈cols/group⌉]` with \
          `packed`'s leading dimensions.\n\
          \n\
          **Result:** `tensor<...xcolsxf32>`, `packed`'s leading dimensions.\n\
          \n\
          **Attributes:** `scheme` (`\"int8\"` or `\"int4\"`, required); `group` (integer, \
          required), the values a scale covers; `cols` (integer, default `B` for `int8` and `2·B` \
          for `int4`), the row length, needed for an odd `int4` row.\n\
          \n\
          **Verifier:** `packed` is an `i8` tensor of rank ≥ 1; `cols` ≥ 1 and `B` is the bytes \
          of a row of `cols` values; `group` is in `1..=cols`; `scales` is exactly \
          `tensor<...x⌈cols/group⌉xf32>`.\n\
          \n\
          **Gradient:** none: quantised weights are frozen, and `autodiff` refuses to \
          differentiate with respect to `packed` or `scales`.\n\
          \n\
          **Lowering:** a pointwise kernel reading the packed byte and the scale; fusion \
          substitutes it into the operand reads of the kernel that uses it (a `tensor.matmul`'s \
          `b`, transposed or not), so the contraction reads the bytes and scales and the f32 \
          weight is never stored.\n\
          \n\
          **FBLayout class:** FTI-C: it has no backward, and its reads follow its output \
          elementwise (a value's byte and scale are at its own row).",
    operands: Arity::Exactly(2),
    results: Arity::Exactly(1),
    attrs: &[
        AttrDef::required("scheme", AttrKind::Enum(SCHEMES), "\"int8\" or \"int4\""),
        AttrDef::required("group", AttrKind::Int, "values of a row sharing one scale"),
        AttrDef::optional(
            "cols",
            AttrKind::Int,
            "B (int8), 2·B (int4)",
            "the length of a row of values (the result's last dimension)",
        ),
    ],
    traits: OpTraits::PURE,
    class: Some(FbClass::FtiC),
    infer: infer_dequantize,
}];

/// Bytes of a packed row of `cols` values.
pub fn packed_row_bytes(scheme: &str, cols: u64) -> u64 {
    if scheme == "int4" {
        cols.div_ceil(2)
    } else {
        cols
    }
}

fn infer_dequantize(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    let cx = Ctx::new(v, "tensor.dequantize", &["packed", "scales"], Arity::Exactly(2))?;
    let packed = cx.tensor(0)?;
    if packed.elem != ElemType::I8 {
        return Err(OpError::operand(
            0,
            format!("expected element type i8, found {} — {}", packed.elem, cx.what(0)),
        )
        .note(format!("`packed` is {packed}; packed weights are bytes (i8)")));
    }
    cx.rank_at_least(0, packed, 1)?;
    let scheme = cx.req_str("scheme", AttrKind::Enum(SCHEMES))?;
    let group = cx.req_int("group")?;
    let bytes = *packed.shape.last().expect("rank ≥ 1");
    let default = if scheme == "int4" { 2 * bytes } else { bytes };
    let cols = cx.int("cols", default as i64)?;
    if cols < 1 {
        return Err(OpError::attr(
            "cols",
            format!("expected an integer ≥ 1, found {cols} — `cols` of tensor.dequantize"),
        ));
    }
    let cols = cols as u64;
    let need = packed_row_bytes(scheme, cols);
    if need != bytes {
        return Err(OpError::attr(
            "cols",
            format!(
                "a row of {cols} {scheme} values is {need} bytes, but `packed` has rows of \
                 {bytes} — `cols` of tensor.dequantize"
            ),
        )
        .note(format!("`packed` is {packed}")));
    }
    if group < 1 || group as u64 > cols {
        return Err(OpError::attr(
            "group",
            format!(
                "expected a group in 1..={cols} (the row length), found {group} — `group` of \
                 tensor.dequantize"
            ),
        ));
    }
    let lead = &packed.shape[..packed.rank() - 1];
    let mut scale_shape = lead.to_vec();
    scale_shape.push(cols.div_ceil(group as u64));
    let scales = cx.tensor(1)?;
    cx.expect_type(
        1,
        scales,
        &tensor_type(&scale_shape, ElemType::F32),
        format!(
            "one f32 scale per group of {group} values of each row of {cols}: `packed`'s \
             leading dimensions and ⌈{cols}/{group}⌉ = {}",
            scale_shape[scale_shape.len() - 1]
        ),
    )?;
    let mut shape = lead.to_vec();
    shape.push(cols);
    cx.done(vec![tensor_type(&shape, ElemType::F32)])
}
