//! `tensor.constant`: a splat constant, the only tensor op without operands.
//!
//! Its result type cannot be derived from operands, so it comes from either the optional `shape`
//! (and `dtype`) attributes or the written signature `: () -> tensor<...>`. When verifying an op
//! that already exists, the infer function reads the declared result type back from the module
//! (the IR's `OpView` has no field for it; see the crate report).

use fbc_ir::registry::ErrorPlace;
use fbc_ir::{Arity, AttrDef, AttrKind, ElemType, OpError, OpTraits, OpView, TensorType, Type};

use super::common::Ctx;
use fbc_ir::OpDef;

const NAME: &str = "tensor.constant";

/// Names of every element type, for `dtype`.
const DTYPES: &[&str] = &["f32", "f16", "bf16", "f64", "i32", "i8", "i64", "i1", "index"];

pub static OPS: &[OpDef] = &[OpDef {
    name: NAME,
    summary: "a tensor whose elements all equal one value (a splat)",
    doc: "A tensor every element of which is `value`.\n\
          \n\
          **Operands:** none.\n\
          \n\
          **Result:** one tensor. Its type is written in the signature, as in\n\
          `%c = tensor.constant {value = 0.0} : () -> tensor<4x4xf32>`, or given by the optional\n\
          `shape` attribute (with `dtype`, default `f32`), as in\n\
          `%c = tensor.constant {value = 1.0, shape = [4, 4]}`; when both are present they must agree.\n\
          \n\
          **Attributes:**\n\
          - `value` (float, required): the element value; an integer literal is accepted. Non-finite\n\
            values (from constant folding `log(0)`, for instance) are allowed for float types.\n\
          - `shape` (integer array, optional): the result shape; every entry ≥ 0.\n\
          - `dtype` (string, optional): the element type name (`f32`, `f16`, `bf16`, `f64`, `i32`,\n\
            `i8`, `i64`, `i1`, `index`); default `f32` with `shape`, else the written type's.\n\
          \n\
          **Verifier:** the result type comes from `shape`/`dtype` or from the signature (without\n\
          either, the op is an error: a splat cannot tell how many elements it has); the result is a\n\
          tensor; `dtype`, when given without `shape`, equals the written element type; for an\n\
          integer element type `value` is a whole number that fits it (`i1`: 0 or 1); the element\n\
          count fits in 64 bits.\n\
          \n\
          **FBLayout class:** none — a constant has no backward and reads no tensor.",
    operands: Arity::Exactly(0),
    results: Arity::Exactly(1),
    attrs: &[
        AttrDef::required("value", AttrKind::Float, "the value of every element"),
        AttrDef {
            name: "shape",
            kind: AttrKind::IntArray,
            required: false,
            default: None,
            doc: "the result shape, when the signature is not written",
        },
        AttrDef {
            name: "dtype",
            kind: AttrKind::Enum(DTYPES),
            required: false,
            default: None,
            doc: "the result element type; `f32` when `shape` is given without it",
        },
    ],
    traits: OpTraits::PURE,
    class: None,
    infer: infer_constant,
}];

/// The result types written for the op being verified, when it exists in the module already.
fn declared_results(v: &OpView<'_>) -> Option<Vec<Type>> {
    let i = v.op.index();
    if i >= v.module.ops.len() {
        return None;
    }
    let d = v.module.op(v.op);
    if !d.def.is(NAME) {
        return None;
    }
    Some(d.results.iter().map(|&r| v.module.value_type(r).clone()).collect())
}

/// The integers integer type `e` holds, as `lo..=hi`; `None` for float types.
fn int_range(e: ElemType) -> Option<(i128, i128)> {
    Some(match e {
        ElemType::I1 => (0, 1),
        ElemType::I8 => (i128::from(i8::MIN), i128::from(i8::MAX)),
        ElemType::I32 => (i128::from(i32::MIN), i128::from(i32::MAX)),
        ElemType::I64 | ElemType::Index => (i128::from(i64::MIN), i128::from(i64::MAX)),
        _ => return None,
    })
}

fn infer_constant(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    let cx = Ctx::new(v, NAME, &[], Arity::Exactly(0))?;
    let value = cx.req_float("value")?;
    let dtype = match cx.opt_str("dtype", AttrKind::Enum(DTYPES))? {
        Some(s) => ElemType::parse(s),
        None => None,
    };
    let t = if let Some(shape) = cx.opt_ints("shape")? {
        TensorType::new(cx.dims("shape", &shape)?, dtype.unwrap_or(ElemType::F32))
    } else {
        match declared_results(v).as_deref() {
            Some([Type::Tensor(t)]) => {
                if let Some(d) = dtype.filter(|&d| d != t.elem) {
                    return Err(OpError::attr(
                        "dtype",
                        format!("expected \"{}\", found \"{d}\" — `dtype` of {NAME}", t.elem),
                    )
                    .note(format!("the written result type is {t}")));
                }
                t.clone()
            }
            Some([other]) => {
                return Err(OpError {
                    message: format!("expected a tensor, found {other} — the result of {NAME}"),
                    place: ErrorPlace::Result(0),
                    notes: vec![],
                })
            }
            Some(types) => {
                return Err(OpError::new(format!("`{NAME}` has 1 results, found {}", types.len())))
            }
            None => {
                return Err(OpError::new(format!(
                    "the result type of {NAME} must be written, as in `: () -> tensor<2x3xf32>`, \
                     or given by a `shape` attribute"
                ))
                .note("a splat constant cannot tell how many elements it has"))
            }
        }
    };
    if let Some((lo, hi)) = int_range(t.elem) {
        // Bounds as floats: `lo` is a power of two (exact); `hi + 1` is too, so compare with `<`.
        let fits = value.is_finite()
            && value.fract() == 0.0
            && value >= lo as f64
            && value < (hi + 1) as f64;
        if !fits {
            return Err(OpError::attr(
                "value",
                format!(
                    "expected a whole number that fits in {}, found {} — `value` of {NAME}",
                    t.elem,
                    fbc_ir::Attr::Float(value)
                ),
            )
            .note(format!("the result type is {t}; {} holds {lo} to {hi}", t.elem)));
        }
    }
    cx.done(vec![t])
}
