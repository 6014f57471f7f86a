//! Reductions (`reduce_sum`, `reduce_max`, `reduce_mean`) and `softmax`.

use fbc_ir::{
    Arity, AttrDef, AttrKind, FbClass, OpDef, OpError, OpTraits, OpView, TensorType, Type,
};

use super::common::{list, Ctx};
use super::AXIS_LAST;

/// The verifier rules every reduction shares, for its documentation.
macro_rules! reduce_rules {
    () => {
        "**Operand:** `x` — a float tensor.\n\
         \n\
         **Result:** `x`'s element type; the reduced axes are removed, or kept with size 1 when\n\
         `keepdim`.\n\
         \n\
         **Attributes:** `axes` (integer array, required): the axes to reduce, each in\n\
         `[-rank, rank)` (negative axes count from the end); `keepdim` (boolean, default `false`).\n\
         \n\
         **Verifier:** `x` is a float tensor; `axes` is not empty (list every axis to reduce\n\
         them all); each axis is in range; no axis is named twice (`-1` and `rank-1` are the same\n\
         axis).\n\
         \n"
    };
}

const AXES: AttrDef = AttrDef::required(
    "axes",
    AttrKind::IntArray,
    "the axes to reduce, each in [-rank, rank), no axis twice",
);

const KEEPDIM: AttrDef = AttrDef::optional(
    "keepdim",
    AttrKind::Bool,
    "false",
    "keep reduced axes with size 1 instead of removing them",
);

const fn reduction(
    name: &'static str,
    summary: &'static str,
    doc: &'static str,
    class: FbClass,
    infer: fbc_ir::registry::InferFn,
) -> OpDef {
    OpDef {
        name,
        summary,
        doc,
        operands: Arity::Exactly(1),
        results: Arity::Exactly(1),
        attrs: &[AXES, KEEPDIM],
        traits: OpTraits::PURE,
        class: Some(class),
        infer,
    }
}

pub static OPS: &[OpDef] = &[
    reduction(
        "tensor.reduce_sum",
        "sum over the given axes",
        concat!(
            "`out = Σ_{axes} x`.\n\n",
            reduce_rules!(),
            "**FBLayout class:** FTI-D: the backward broadcasts `dout` back over the reduced axes \
             (no forward tensor needed), reading a tensor of a different shape with a different \
             access pattern than the forward's reduction."
        ),
        FbClass::FtiD,
        infer_reduce_sum,
    ),
    reduction(
        "tensor.reduce_max",
        "maximum over the given axes",
        concat!(
            "`out = max_{axes} x`.\n\n",
            reduce_rules!(),
            "**FBLayout class:** FTD-D: the backward routes `dout` to the arg-max positions, which \
             needs the forward `x` and `out` (dependent), and broadcasts over the reduced axes \
             (divergent access)."
        ),
        FbClass::FtdD,
        infer_reduce_max,
    ),
    reduction(
        "tensor.reduce_mean",
        "arithmetic mean over the given axes",
        concat!(
            "`out = Σ_{axes} x / Π_{axes} x.shape[axis]` (a mean over zero elements is NaN).\n\n",
            reduce_rules!(),
            "**FBLayout class:** FTI-D: the backward broadcasts `dout / count` over the reduced \
             axes; no forward tensor is needed and the access diverges from the forward's."
        ),
        FbClass::FtiD,
        infer_reduce_mean,
    ),
    OpDef {
        name: "tensor.softmax",
        summary: "numerically stable softmax along one axis",
        doc: "`y = exp(x - max_axis x) / Σ_axis exp(x - max_axis x)`.\n\
              \n\
              **Operand:** `x` — a float tensor of rank ≥ 1.\n\
              \n\
              **Result:** a tensor of `x`'s type.\n\
              \n\
              **Attributes:** `axis` (integer, default `-1`), in `[-rank, rank)`.\n\
              \n\
              **Verifier:** `x` is a float tensor; `axis` is in range (a rank-0 `x` has no axis).\n\
              \n\
              **FBLayout class:** FTD-C (paper Table 1): `dx = y · (dy - Σ_axis dy · y)`\n\
              (`tensor.softmax_grad`) needs the forward `y` and reads it along the same axis as\n\
              the forward.",
        operands: Arity::Exactly(1),
        results: Arity::Exactly(1),
        attrs: &[AXIS_LAST],
        traits: OpTraits::PURE,
        class: Some(FbClass::FtdC),
        infer: infer_softmax,
    },
];

fn infer_reduce_sum(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    reduce(v, "tensor.reduce_sum")
}

fn infer_reduce_max(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    reduce(v, "tensor.reduce_max")
}

fn infer_reduce_mean(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    reduce(v, "tensor.reduce_mean")
}

fn reduce(v: &OpView<'_>, name: &'static str) -> Result<Vec<Type>, OpError> {
    let cx = Ctx::new(v, name, &["x"], Arity::Exactly(1))?;
    let x = cx.float_tensor(0)?;
    let axes = cx.req_ints("axes")?;
    let keepdim = cx.bool("keepdim", false)?;
    if axes.is_empty() {
        let all: Vec<usize> = (0..x.rank()).collect();
        let note = if x.rank() == 0 {
            format!("`x` is {x}, of rank 0: there is nothing to reduce")
        } else {
            format!("to reduce every axis of `x` ({x}), list them all: `axes = {}`", list(&all))
        };
        return Err(OpError::attr(
            "axes",
            format!("expected at least one axis, found [] — `axes` of {name}"),
        )
        .note(note));
    }
    let mut first: Vec<Option<usize>> = vec![None; x.rank()];
    for (j, &a) in axes.iter().enumerate() {
        let k = cx.axis("axes", &format!("element {j} of `axes`"), a, x, 0)?;
        if let Some(j0) = first[k] {
            return Err(OpError::attr(
                "axes",
                format!("axis {k} is listed twice — element {j} of `axes` of {name}"),
            )
            .note(format!(
                "`axes` = {}: elements {j0} ({}) and {j} ({a}) both name axis {k} of {x}",
                list(&axes),
                axes[j0]
            )));
        }
        first[k] = Some(j);
    }
    let mut shape = x.shape.clone();
    if keepdim {
        for (k, f) in first.iter().enumerate() {
            if f.is_some() {
                shape[k] = 1;
            }
        }
    } else {
        shape = x.shape.iter().zip(&first).filter(|(_, f)| f.is_none()).map(|(&d, _)| d).collect();
    }
    cx.done(vec![TensorType::new(shape, x.elem)])
}

fn infer_softmax(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    let cx = Ctx::new(v, "tensor.softmax", &["x"], Arity::Exactly(1))?;
    let x = cx.float_tensor(0)?;
    let axis = cx.int("axis", -1)?;
    cx.axis("axis", "`axis`", axis, x, 0)?;
    cx.done(vec![x.clone()])
}
