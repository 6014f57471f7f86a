//! Data-movement ops: `reshape`, `transpose`, `broadcast`, `slice`, `concat` and `update_slice`.
//! They accept any element type (moving i32 ids around is sensible) and never compute on values.

use fbc_ir::types::Shape;
use fbc_ir::{
    Arity, AttrDef, AttrKind, FbClass, OpDef, OpError, OpTraits, OpView, TensorType, Type,
};

use super::common::{broadcasts_to, list, Ctx};

pub static OPS: &[OpDef] = &[
    OpDef {
        name: "tensor.reshape",
        summary: "same elements in row-major order, new shape",
        doc: "`y` has the elements of `x` in the same row-major order, with shape `shape`.\n\
              \n\
              **Operand:** `x` — a tensor of any element type.\n\
              \n\
              **Result:** `tensor<shape x elem>`, where one `-1` in `shape` is replaced by the\n\
              dimension that makes the element counts equal (as NumPy does). The result type is\n\
              always the concrete shape; the printer keeps the attribute as written.\n\
              \n\
              **Attributes:** `shape` (integer array, required): dimensions ≥ 0, or at most one `-1`.\n\
              \n\
              **Verifier:** every entry of `shape` is ≥ 0 or `-1`; at most one `-1`; the product of\n\
              the other entries fits in 64 bits; a `-1` needs the other entries' product to be\n\
              non-zero and to divide `x`'s element count; without `-1`, the element counts are equal.\n\
              \n\
              **FBLayout class:** FTI-D (paper Table 1): the backward reshapes `dy` back without\n\
              forward tensors, with the inverse index mapping.",
        operands: Arity::Exactly(1),
        results: Arity::Exactly(1),
        attrs: &[AttrDef::required(
            "shape",
            AttrKind::IntArray,
            "the new shape; one entry may be -1 (inferred)",
        )],
        traits: OpTraits::PURE,
        class: Some(FbClass::FtiD),
        infer: infer_reshape,
    },
    OpDef {
        name: "tensor.transpose",
        summary: "permutes the dimensions",
        doc: "`out[i_perm[0], ..., i_perm[r-1]] = x[i_0, ..., i_{r-1}]`, i.e.\n\
              `out.shape[k] = x.shape[perm[k]]`.\n\
              \n\
              **Operand:** `x` — a tensor of any element type.\n\
              \n\
              **Result:** a tensor of `x`'s element type with the permuted shape.\n\
              \n\
              **Attributes:** `perm` (integer array, required): a permutation of `0..rank`.\n\
              \n\
              **Verifier:** `perm` has exactly `rank` entries, each in `[0, rank)` (negative\n\
              entries are not accepted), none repeated.\n\
              \n\
              **FBLayout class:** FTI-D (paper Table 1, Transpose/Permute): the backward applies\n\
              the inverse permutation to `dy`, no forward tensor needed, divergent access.",
        operands: Arity::Exactly(1),
        results: Arity::Exactly(1),
        attrs: &[AttrDef::required("perm", AttrKind::IntArray, "a permutation of 0..rank")],
        traits: OpTraits::PURE,
        class: Some(FbClass::FtiD),
        infer: infer_transpose,
    },
    OpDef {
        name: "tensor.broadcast",
        summary: "NumPy broadcast to a given shape",
        doc: "`y = np.broadcast_to(x, shape)`: `x`'s dimensions are aligned with the last\n\
              dimensions of `shape`; a dimension of size 1 is repeated.\n\
              \n\
              **Operand:** `x` — a tensor of any element type.\n\
              \n\
              **Result:** `tensor<shape x elem>`.\n\
              \n\
              **Attributes:** `shape` (integer array, required): dimensions ≥ 0.\n\
              \n\
              **Verifier:** every entry of `shape` is ≥ 0; `shape` has at least `x`'s rank; each\n\
              dimension of `x` is 1 or equals the aligned entry of `shape`; the result's element\n\
              count fits in 64 bits.\n\
              \n\
              **FBLayout class:** FTI-D: the backward sums `dy` over the broadcast dimensions\n\
              (`tensor.unbroadcast`) without forward tensors, reading with a different pattern than\n\
              the forward's replication.",
        operands: Arity::Exactly(1),
        results: Arity::Exactly(1),
        attrs: &[AttrDef::required("shape", AttrKind::IntArray, "the shape to broadcast to")],
        traits: OpTraits::PURE,
        class: Some(FbClass::FtiD),
        infer: infer_broadcast,
    },
    OpDef {
        name: "tensor.slice",
        summary: "a contiguous box of a tensor, x[start:end] per axis",
        doc: "`out[i] = x[start + i]` for `0 ≤ i < end - start` (per axis; unit stride).\n\
              \n\
              **Operand:** `x` — a tensor of any element type.\n\
              \n\
              **Result:** `tensor<(end - start) x elem>`.\n\
              \n\
              **Attributes:** `start`, `end` (integer arrays, required): one entry per axis of `x`.\n\
              \n\
              **Verifier:** `start` and `end` each have exactly `rank` entries; per axis\n\
              `0 ≤ start ≤ end ≤ x.shape[axis]` (no negative indices, no clamping).\n\
              \n\
              **FBLayout class:** FTI-D: the backward (`tensor.slice_grad`) pads `dy` with zeros\n\
              to `x`'s shape; no forward tensor is needed and the write pattern (a sub-box of a\n\
              larger tensor) diverges from the forward's read.",
        operands: Arity::Exactly(1),
        results: Arity::Exactly(1),
        attrs: &[
            AttrDef::required("start", AttrKind::IntArray, "first index per axis (inclusive)"),
            AttrDef::required("end", AttrKind::IntArray, "last index per axis (exclusive)"),
        ],
        traits: OpTraits::PURE,
        class: Some(FbClass::FtiD),
        infer: infer_slice,
    },
    OpDef {
        name: "tensor.concat",
        summary: "concatenation along one axis",
        doc: "Joins the operands along `axis`, in order.\n\
              \n\
              **Operands:** one or more tensors of one element type and rank, with equal\n\
              dimensions except along `axis`.\n\
              \n\
              **Result:** their common shape, with `axis` the sum of the operands' sizes there.\n\
              \n\
              **Attributes:** `axis` (integer, required), in `[-rank, rank)`.\n\
              \n\
              **Verifier:** at least one operand; all operands are tensors of operand 0's element\n\
              type and rank; `axis` is in range; every other dimension equals operand 0's; the\n\
              summed size fits in 64 bits.\n\
              \n\
              **FBLayout class:** FTI-D: the backward slices `dy` into one piece per operand, no\n\
              forward tensor needed, with per-operand offsets the forward does not have.",
        operands: Arity::AtLeast(1),
        results: Arity::Exactly(1),
        attrs: &[AttrDef::required(
            "axis",
            AttrKind::Int,
            "the axis to concatenate along; negative values count from the end",
        )],
        traits: OpTraits::PURE,
        class: Some(FbClass::FtiD),
        infer: infer_concat,
    },
    OpDef {
        name: "tensor.update_slice",
        summary: "a tensor with a run of slices along one axis replaced, at an offset known at run time",
        doc: "`dest` with `update` written over it along `axis` from `offset` on:\n\
              `out[.., offset + i, ..] = update[.., i, ..]` for `0 ≤ i < n` (`n` = `update`'s size along\n\
              `axis`), `out = dest` elsewhere. The KV cache of a decoder: `dest` is the cache\n\
              `[B, KV, max_seq, head_dim]`, `update` the new tokens' keys or values, `offset` the\n\
              position of the first of them (XLA's `DynamicUpdateSlice` along one axis).\n\
              \n\
              **Operands:** `dest` — a tensor of any element type; `update` — a tensor of `dest`'s\n\
              element type and rank, equal to it on every axis but `axis`; `offset` — a `tensor<i32>`\n\
              (rank 0), read when the op runs.\n\
              \n\
              **Result:** `dest`'s type.\n\
              \n\
              **Attributes:** `axis` (integer, required), in `[-rank, rank)`.\n\
              \n\
              **Verifier:** the types above; `n ≤ dest.shape[axis]`; where `offset` is a\n\
              `tensor.constant`, `0 ≤ offset ≤ dest.shape[axis] - n`. At run time an offset outside\n\
              that range is an error of the op (nothing is written), on every back end.\n\
              \n\
              **Lowering:** where `dest` is not read after the op, the result takes `dest`'s storage\n\
              and one launch writes `update` into it in place (no copy of `dest`); otherwise `dest`\n\
              is copied first.\n\
              \n\
              **FBLayout class:** FTI-D (data movement). It has no gradient rule: it serves\n\
              inference graphs.",
        operands: Arity::Exactly(3),
        results: Arity::Exactly(1),
        attrs: &[AttrDef::required(
            "axis",
            AttrKind::Int,
            "the axis the offset runs along; negative values count from the end",
        )],
        traits: OpTraits::PURE,
        class: Some(FbClass::FtiD),
        infer: infer_update_slice,
    },
];

/// The value of the splat `tensor.constant` that defines operand `i` of the op being verified,
/// when it exists in the module already and is one.
fn constant_operand(v: &OpView<'_>, i: usize) -> Option<f64> {
    if v.op.index() >= v.module.ops.len() {
        return None;
    }
    let operand = *v.module.op(v.op).operands.get(i)?;
    let def = v.module.op(v.module.defining_op(operand)?);
    if !def.def.is("tensor.constant") {
        return None;
    }
    def.attr("value").and_then(super::constant::splat)
}

fn infer_update_slice(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    const NAME: &str = "tensor.update_slice";
    let cx = Ctx::new(v, NAME, &["dest", "update", "offset"], Arity::Exactly(3))?;
    let dest = cx.tensor(0)?;
    let update = cx.tensor(1)?;
    let offset = cx.i32_tensor(2)?;
    cx.rank_exactly(2, offset, 0, "a scalar `tensor<i32>`")?;
    cx.same_elem(1, update, 0)?;
    cx.rank_exactly(1, update, dest.rank(), &format!("of `dest`'s rank ({dest})"))?;
    let axis = cx.req_int("axis")?;
    let k = cx.axis("axis", "`axis`", axis, dest, 0)?;
    for (j, (&a, &b)) in dest.shape.iter().zip(&update.shape).enumerate() {
        if j != k && a != b {
            return Err(OpError::operand(
                1,
                format!("expected {a}, found {b} — dimension {j} of {}", cx.what(1)),
            )
            .note(format!(
                "`update` equals `dest` on every axis but {k}: `dest` is {dest}, `update` is {update}"
            )));
        }
    }
    let (n, size) = (update.shape[k], dest.shape[k]);
    if n > size {
        return Err(OpError::operand(
            1,
            format!("{n} slices along axis {k} do not fit in `dest`'s {size} — {}", cx.what(1)),
        )
        .note(format!("`dest` is {dest}, `update` is {update}")));
    }
    if let Some(o) = constant_operand(v, 2) {
        if o < 0.0 || o > (size - n) as f64 {
            return Err(OpError::operand(
                2,
                format!(
                    "the offset {o} is out of range: {n} slices from it must fit in `dest`'s {size} along axis {k}, so it must be from 0 to {} — {}",
                    size - n,
                    cx.what(2)
                ),
            ));
        }
    }
    cx.done(vec![dest.clone()])
}

fn infer_reshape(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    const NAME: &str = "tensor.reshape";
    let cx = Ctx::new(v, NAME, &["x"], Arity::Exactly(1))?;
    let x = cx.tensor(0)?;
    let numel = cx.numel(0, x)?;
    let shape = cx.req_ints("shape")?;
    let mut inferred: Option<usize> = None;
    let mut known: u64 = 1;
    for (j, &d) in shape.iter().enumerate() {
        if d == -1 {
            if let Some(j0) = inferred {
                return Err(OpError::attr(
                    "shape",
                    format!("expected at most one -1, found a second one — element {j} of `shape` of {NAME}"),
                )
                .note(format!("element {j0} is -1 already; only one dimension can be inferred")));
            }
            inferred = Some(j);
            continue;
        }
        let Ok(d) = u64::try_from(d) else {
            return Err(OpError::attr(
                "shape",
                format!(
                    "expected a non-negative dimension or -1, found {d} — element {j} of `shape` of {NAME}"
                ),
            ));
        };
        known = known.checked_mul(d).ok_or_else(|| {
            OpError::attr(
                "shape",
                format!("`shape` {} has more elements than fit in 64 bits — {NAME}", list(&shape)),
            )
        })?;
    }
    let dims: Shape = match inferred {
        Some(j) => {
            if known == 0 || numel % known != 0 {
                let why = if known == 0 {
                    "the other dimensions multiply to 0, so any size would fit".to_string()
                } else {
                    format!(
                        "{numel} is not a multiple of {known}, the product of the other dimensions"
                    )
                };
                return Err(OpError::attr(
                    "shape",
                    format!(
                        "cannot infer the -1 of `shape` {} for {x} with {numel} elements — element {j} of `shape` of {NAME}",
                        list(&shape)
                    ),
                )
                .note(why));
            }
            let fill = numel / known;
            shape.iter().map(|&d| if d == -1 { fill } else { d.unsigned_abs() }).collect()
        }
        None => {
            if known != numel {
                return Err(OpError::attr(
                    "shape",
                    format!(
                        "expected {numel} elements, found {known} — `shape` {} of {NAME}",
                        list(&shape)
                    ),
                )
                .note(format!("reshape keeps every element: `x` is {x}, with {numel} elements")));
            }
            shape.iter().map(|&d| d.unsigned_abs()).collect()
        }
    };
    cx.done(vec![TensorType::new(dims, x.elem)])
}

fn infer_transpose(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    const NAME: &str = "tensor.transpose";
    let cx = Ctx::new(v, NAME, &["x"], Arity::Exactly(1))?;
    let x = cx.tensor(0)?;
    let perm = cx.req_ints("perm")?;
    let r = x.rank();
    if perm.len() != r {
        return Err(OpError::attr(
            "perm",
            format!("expected {r} entries, found {} — `perm` of {NAME}", perm.len()),
        )
        .note(format!("`perm` is a permutation of 0..{r}, one entry per axis of `x` ({x})")));
    }
    let mut first: Vec<Option<usize>> = vec![None; r];
    let mut shape = Shape::with_capacity(r);
    for (j, &p) in perm.iter().enumerate() {
        let Some(k) = usize::try_from(p).ok().filter(|&k| k < r) else {
            return Err(OpError::attr(
                "perm",
                format!(
                    "expected an axis from 0 to {}, found {p} — element {j} of `perm` of {NAME}",
                    r - 1
                ),
            )
            .note(format!("`perm` is a permutation of 0..{r}; `x` is {x}")));
        };
        if let Some(j0) = first[k] {
            return Err(OpError::attr(
                "perm",
                format!("axis {k} is listed twice — element {j} of `perm` of {NAME}"),
            )
            .note(format!(
                "`perm` = {} repeats element {j0}, so it is not a permutation of 0..{r}",
                list(&perm)
            )));
        }
        first[k] = Some(j);
        shape.push(x.shape[k]);
    }
    cx.done(vec![TensorType::new(shape, x.elem)])
}

fn infer_broadcast(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    const NAME: &str = "tensor.broadcast";
    let cx = Ctx::new(v, NAME, &["x"], Arity::Exactly(1))?;
    let x = cx.tensor(0)?;
    let raw = cx.req_ints("shape")?;
    let shape = cx.dims("shape", &raw)?;
    match broadcasts_to(&x.shape, &shape) {
        Ok(()) => cx.done(vec![TensorType::new(shape, x.elem)]),
        Err(None) => Err(OpError::attr(
            "shape",
            format!(
                "expected at least {} dimensions, found {} — `shape` {} of {NAME}",
                x.rank(),
                shape.len(),
                list(&raw)
            ),
        )
        .note(format!("broadcasting never removes dimensions: `x` is {x}"))),
        Err(Some(e)) => Err(OpError::attr(
            "shape",
            format!("cannot broadcast {x} to {}: {e} — `shape` of {NAME}", list(&raw)),
        )
        .note("each dimension of `x` must be 1 or equal the aligned dimension of `shape` (aligned at the last dimension)")),
    }
}

fn infer_slice(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    const NAME: &str = "tensor.slice";
    let cx = Ctx::new(v, NAME, &["x"], Arity::Exactly(1))?;
    let x = cx.tensor(0)?;
    let start = cx.req_ints("start")?;
    let end = cx.req_ints("end")?;
    let r = x.rank();
    for (attr, vals) in [("start", &start), ("end", &end)] {
        if vals.len() != r {
            return Err(OpError::attr(
                attr,
                format!("expected {r} entries, found {} — `{attr}` of {NAME}", vals.len()),
            )
            .note(format!("`{attr}` has one entry per axis of `x` ({x})")));
        }
    }
    let mut shape = Shape::with_capacity(r);
    for k in 0..r {
        let d = x.shape[k];
        let (s, e) = (start[k], end[k]);
        let s_ok = u64::try_from(s).ok().filter(|&s| s <= d);
        let Some(s) = s_ok else {
            return Err(OpError::attr(
                "start",
                format!(
                    "expected a start from 0 to {d}, found {s} — element {k} of `start` of {NAME}"
                ),
            )
            .note(format!("axis {k} of `x` ({x}) has size {d}")));
        };
        let Some(e) = u64::try_from(e).ok().filter(|&e| e >= s && e <= d) else {
            return Err(OpError::attr(
                "end",
                format!(
                    "expected an end from {s} to {d}, found {e} — element {k} of `end` of {NAME}"
                ),
            )
            .note(format!("axis {k} of `x` ({x}) has size {d} and the slice starts at {s}")));
        };
        shape.push(e - s);
    }
    cx.done(vec![TensorType::new(shape, x.elem)])
}

fn infer_concat(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    const NAME: &str = "tensor.concat";
    let cx = Ctx::new(v, NAME, &[], Arity::AtLeast(1))?;
    let first = cx.tensor(0)?;
    let axis = cx.req_int("axis")?;
    let k = cx.axis("axis", "`axis`", axis, first, 0)?;
    let mut shape = first.shape.clone();
    for i in 1..v.operand_types.len() {
        let t = cx.tensor(i)?;
        cx.same_elem(i, t, 0)?;
        if t.rank() != first.rank() {
            return Err(OpError::operand(
                i,
                format!("expected rank {}, found rank {} — {}", first.rank(), t.rank(), cx.what(i)),
            )
            .note(format!("operand {i} is {t}; operand 0 is {first}")));
        }
        for (j, (&a, &b)) in first.shape.iter().zip(&t.shape).enumerate() {
            if j != k && a != b {
                return Err(OpError::operand(
                    i,
                    format!("expected {a}, found {b} — dimension {j} of {}", cx.what(i)),
                )
                .note(format!(
                    "operands agree on every dimension but the concatenation axis {k}: operand 0 is {first}, operand {i} is {t}"
                )));
            }
        }
        shape[k] = shape[k].checked_add(t.shape[k]).ok_or_else(|| {
            OpError::new(format!(
                "the concatenated size along axis {k} does not fit in 64 bits — {NAME}"
            ))
        })?;
    }
    cx.done(vec![TensorType::new(shape, first.elem)])
}
