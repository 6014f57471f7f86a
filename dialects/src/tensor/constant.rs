//! `tensor.constant`: a splat or dense constant, the only tensor op without operands.
//!
//! Its result type cannot be derived from operands, so it comes from either the optional `shape`
//! (and `dtype`) attributes or the written signature `: () -> tensor<...>`. When verifying an op
//! that already exists, the infer function reads the declared result type back from the module
//! (the IR's `OpView` has no field for it; see the crate report).

use fbc_ir::dense::int_range;
use fbc_ir::registry::ErrorPlace;
use fbc_ir::{
    Arity, Attr, AttrDef, AttrKind, Dense, ElemType, OpError, OpTraits, OpView, TensorType, Type,
};

use super::common::Ctx;
use fbc_ir::OpDef;

const NAME: &str = "tensor.constant";

/// Names of every element type, for `dtype`.
const DTYPES: &[&str] = &["f32", "f16", "bf16", "f64", "i32", "i8", "i64", "i1", "index"];

pub static OPS: &[OpDef] = &[OpDef {
    name: NAME,
    summary: "a tensor whose elements all equal one value (a splat), or given one by one (dense)",
    doc: "A tensor every element of which is `value` (a splat), or whose elements `value` lists\n\
          (`dense<...>`, row-major).\n\
          \n\
          **Operands:** none.\n\
          \n\
          **Result:** one tensor. Its type is written in the signature, as in\n\
          `%c = tensor.constant {value = 0.0} : () -> tensor<4x4xf32>`, or given by the optional\n\
          `shape` attribute (with `dtype`, default `f32`), as in\n\
          `%c = tensor.constant {value = 1.0, shape = [4, 4]}`; when both are present they must agree.\n\
          \n\
          **Attributes:**\n\
          - `value` (required): a float, the element value (an integer literal is accepted;\n\
            non-finite values, from constant folding `log(0)` for instance, are allowed for float\n\
            types); or MLIR's dense elements, `dense<[1.0, 2.0, 3.0, 4.0]>` (a row-major list;\n\
            nested brackets read as the same list), `dense<0.5>` (a splat) or\n\
            `dense<\"0x0000803F...\">` (the elements' little-endian bytes in the result element\n\
            type: 4 a `f32`, 2 a `f16`, 1 an `i1`, ...).\n\
          - `shape` (integer array, optional): the result shape; every entry ≥ 0.\n\
          - `dtype` (string, optional): the element type name (`f32`, `f16`, `bf16`, `f64`, `i32`,\n\
            `i8`, `i64`, `i1`, `index`); default `f32` with `shape`, else the written type's.\n\
          \n\
          **Verifier:** the result type comes from `shape`/`dtype` or from the signature (without\n\
          either, the op is an error: a splat cannot tell how many elements it has); the result is a\n\
          tensor; `dtype`, when given without `shape`, equals the written element type; for an\n\
          integer element type `value` is a whole number that fits it (`i1`: 0 or 1), and so is\n\
          every element of a dense `value`; a dense `value` has one element (a splat) or as many as\n\
          the result, and a hex one a whole number of elements; the element count fits in 64 bits.\n\
          \n\
          **FBLayout class:** none — a constant has no backward and reads no tensor.",
    operands: Arity::Exactly(0),
    results: Arity::Exactly(1),
    attrs: &[
        AttrDef::required(
            "value",
            AttrKind::Any,
            "the value of every element (a float), or the elements (`dense<...>`)",
        ),
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

fn infer_constant(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    let cx = Ctx::new(v, NAME, &[], Arity::Exactly(0))?;
    let value = match v.attr("value") {
        Some(Attr::Dense(d)) => Value::Dense(d),
        Some(a) => match a.as_float() {
            Some(x) => Value::Splat(x),
            None => {
                return Err(OpError::attr(
                    "value",
                    format!(
                        "expected a float or `dense<...>`, found {} — `value` of {NAME}",
                        a.kind_name()
                    ),
                ))
            }
        },
        None => return Err(OpError::new(format!("`{NAME}` needs attribute `value`"))),
    };
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
    let value = match value {
        Value::Splat(x) => x,
        Value::Dense(d) => {
            check_dense(d, &t)?;
            return cx.done(vec![t]);
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

/// What `value` holds.
enum Value<'a> {
    Splat(f64),
    Dense(&'a Dense),
}

/// A dense `value` for result type `t`: one element or `t`'s count, each one that `t`'s element
/// type holds.
fn check_dense(d: &Dense, t: &TensorType) -> Result<(), OpError> {
    let at = |e: String| {
        OpError::attr("value", format!("{e} — `value` of {NAME}"))
            .note(format!("the result type is {t}"))
    };
    let n = d.len_in(t.elem).map_err(at)?;
    let want = t.shape.iter().try_fold(1u64, |a, &x| a.checked_mul(x));
    if n != 1 && Some(n) != want {
        return Err(at(format!(
            "expected {} elements, found {n}",
            want.map_or_else(|| "more than 2^64".to_string(), |w| w.to_string())
        )));
    }
    d.decode(t.elem).map(drop).map_err(at)
}

/// The one value of a splat `value` (a float, or `dense<x>`); `None` for a dense list.
pub fn splat(value: &Attr) -> Option<f64> {
    value.as_float().or_else(|| value.as_dense().and_then(Dense::splat))
}
