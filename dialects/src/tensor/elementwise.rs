//! Elementwise tensor ops: the broadcasting binary ops (`add`, `sub`, `mul`, `div`, `max`,
//! `min`, `pow`), `select`, `cast`, the unary math ops (`neg`, `exp`, `log`, `sqrt`, `rsqrt`, `tanh`,
//! `sigmoid`, `relu`, `silu`, `gelu`, `erf`) and `scale`.

use fbc_ir::{
    Arity, AttrDef, AttrKind, FbClass, OpDef, OpError, OpTraits, OpView, TensorType, Type,
};

use super::common::Ctx;
use super::APPROXIMATE;

/// The verifier rules every broadcasting binary op shares, for its documentation.
macro_rules! binary_rules {
    () => {
        "**Operands:** `a`, `b` — float tensors of the same element type.\n\
         \n\
         **Result:** a tensor of the NumPy broadcast of the two shapes, with their element type.\n\
         \n\
         **Verifier:** both operands are tensors with a float element type; the element types are\n\
         equal; the shapes broadcast (aligned at the last dimension, each pair of dimensions equal\n\
         or one of them 1), else `cannot broadcast tensor<3x4xf32> with tensor<5xf32>: dimension 1\n\
         is 4 vs 5`, counting dimensions of the broadcast result.\n\
         \n"
    };
}

/// The verifier rules every unary float op shares, for its documentation.
macro_rules! unary_rules {
    () => {
        "**Operand:** `x` — a float tensor.\n\
         \n\
         **Result:** a tensor of `x`'s type.\n\
         \n\
         **Verifier:** `x` is a tensor with a float element type (f32, f16, bf16, f64).\n\
         \n"
    };
}

/// Defines one infer function per op, each forwarding to a shared checker with the op's name.
macro_rules! infer_fns {
    ($($f:ident => $helper:ident($name:literal)),* $(,)?) => {
        $(fn $f(v: &OpView<'_>) -> Result<Vec<Type>, OpError> { $helper(v, $name) })*
    };
}

const fn binary(
    name: &'static str,
    summary: &'static str,
    doc: &'static str,
    commutative: bool,
    class: FbClass,
    infer: fbc_ir::registry::InferFn,
) -> OpDef {
    OpDef {
        name,
        summary,
        doc,
        operands: Arity::Exactly(2),
        results: Arity::Exactly(1),
        attrs: &[],
        traits: if commutative { OpTraits::COMMUTATIVE } else { OpTraits::ELEMENTWISE },
        class: Some(class),
        infer,
    }
}

const fn unary(
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
        attrs: &[],
        traits: OpTraits::ELEMENTWISE,
        class: Some(class),
        infer,
    }
}

pub static OPS: &[OpDef] = &[
    binary(
        "tensor.add",
        "elementwise sum with NumPy broadcasting",
        concat!(
            "`out = a + b`, elementwise, after broadcasting both operands to a common shape.\n\n",
            binary_rules!(),
            "**FBLayout class:** FTI-C (paper Table 1): `da = unbroadcast(dout)`, \
             `db = unbroadcast(dout)` need no forward tensor and read `dout` elementwise, as the \
             forward reads `a` and `b`."
        ),
        true,
        FbClass::FtiC,
        infer_add,
    ),
    binary(
        "tensor.sub",
        "elementwise difference with NumPy broadcasting",
        concat!(
            "`out = a - b`, elementwise, after broadcasting both operands to a common shape.\n\n",
            binary_rules!(),
            "**FBLayout class:** FTI-C (paper Table 1, Subtract): `da = dout`, `db = -dout` \
             (unbroadcast) need no forward tensor; access is elementwise in both directions."
        ),
        false,
        FbClass::FtiC,
        infer_sub,
    ),
    binary(
        "tensor.mul",
        "elementwise product with NumPy broadcasting",
        concat!(
            "`out = a · b`, elementwise, after broadcasting both operands to a common shape.\n\n",
            binary_rules!(),
            "**FBLayout class:** FTD-C: `da = dout · b`, `db = dout · a` need the forward operands \
             (dependent), read with the same elementwise pattern as the forward (consistent)."
        ),
        true,
        FbClass::FtdC,
        infer_mul,
    ),
    binary(
        "tensor.div",
        "elementwise quotient with NumPy broadcasting",
        concat!(
            "`out = a / b`, elementwise (IEEE division: `x / 0` is ±inf or NaN), after \
             broadcasting both operands to a common shape.\n\n",
            binary_rules!(),
            "**FBLayout class:** FTD-C: `da = dout / b`, `db = -dout · a / b²` need the forward \
             operands, read elementwise as in the forward."
        ),
        false,
        FbClass::FtdC,
        infer_div,
    ),
    binary(
        "tensor.max",
        "elementwise maximum with NumPy broadcasting",
        concat!(
            "`out = max(a, b)`, elementwise, after broadcasting both operands to a common shape.\n\n",
            binary_rules!(),
            "**FBLayout class:** FTD-C: the gradient is routed by the mask `ge(a, b)`, which needs \
             the forward operands, read elementwise as in the forward."
        ),
        true,
        FbClass::FtdC,
        infer_max,
    ),
    binary(
        "tensor.min",
        "elementwise minimum with NumPy broadcasting",
        concat!(
            "`out = min(a, b)`, elementwise, after broadcasting both operands to a common shape.\n\n",
            binary_rules!(),
            "**FBLayout class:** FTD-C: the gradient is routed by the mask `ge(b, a)`, which needs \
             the forward operands, read elementwise as in the forward."
        ),
        true,
        FbClass::FtdC,
        infer_min,
    ),
    binary(
        "tensor.pow",
        "elementwise power with NumPy broadcasting",
        concat!(
            "`out = a ^ b`, elementwise, after broadcasting both operands to a common shape, with \
             C's `pow` semantics: a negative base needs an integral exponent (else NaN), \
             `pow(x, 0) = 1` for every `x`, `pow(0, b) = +inf` for `b < 0`.\n\n",
            binary_rules!(),
            "**FBLayout class:** FTD-C: `da = dout · b · a^(b-1)`, `db = dout · a^b · ln a` need \
             the forward operands, read elementwise as in the forward."
        ),
        false,
        FbClass::FtdC,
        infer_pow,
    ),
    OpDef {
        name: "tensor.cast",
        summary: "converts a float tensor to another float element type",
        doc: "`y = x` in element type `dtype`, each value rounded to nearest (even) where the \
              new type is narrower; `f16` overflows to ±inf.\n\
              \n\
              **Operand:** `x` — a float tensor.\n\
              \n\
              **Result:** `x`'s shape with element type `dtype`.\n\
              \n\
              **Attributes:** `dtype` (string, required): `f32`, `f16`, `bf16` or `f64`.\n\
              \n\
              **Verifier:** `x` is a float tensor; `dtype` is one of the float types.\n\
              \n\
              **FBLayout class:** FTI-C: `dx = cast(dy)` back to `x`'s type needs no forward \
              tensor; access is elementwise in both directions.",
        operands: Arity::Exactly(1),
        results: Arity::Exactly(1),
        attrs: &[AttrDef::required("dtype", AttrKind::Enum(FLOAT_TYPES), "the result's element type")],
        traits: OpTraits::PURE,
        class: Some(FbClass::FtiC),
        infer: infer_cast,
    },
    OpDef {
        name: "tensor.select",
        summary: "elementwise choice: b where the mask is nonzero, else c (NumPy broadcasting)",
        doc: concat!(
            "`out = mask != 0 ? a : b`, elementwise, after broadcasting the three operands to a \
             common shape. The unchosen operand does not reach the result, so an infinite or NaN \
             value there is harmless (unlike `a · mask + b · (1 - mask)`).\n\n",
            "**Operands:** `mask`, `a`, `b` — float tensors of one element type.\n\n",
            "**Result:** a tensor of the broadcast of the three shapes, with their element type.\n\n",
            "**Verifier:** the three operands are float tensors of one element type whose shapes \
             broadcast together.\n\n",
            "**FBLayout class:** FTD-C: `da = select(mask, dout, 0)`, `db = select(mask, 0, dout)` \
             need the forward mask, read elementwise as in the forward."
        ),
        operands: Arity::Exactly(3),
        results: Arity::Exactly(1),
        attrs: &[],
        traits: OpTraits::ELEMENTWISE,
        class: Some(FbClass::FtdC),
        infer: infer_select,
    },
    unary(
        "tensor.erf",
        "elementwise Gauss error function",
        concat!(
            "`y = erf(x) = 2/√π ∫₀ˣ e^(−t²) dt`, elementwise.\n\n",
            unary_rules!(),
            "**FBLayout class:** FTD-C: `dx = dy · 2/√π · e^(−x²)` needs the forward `x`, read \
             elementwise as in the forward."
        ),
        FbClass::FtdC,
        infer_erf,
    ),
    unary(
        "tensor.neg",
        "elementwise negation",
        concat!(
            "`y = -x`, elementwise.\n\n",
            unary_rules!(),
            "**FBLayout class:** FTI-C: `dx = -dy` needs no forward tensor and reads `dy` \
             elementwise, like the forward reads `x` (the same reasoning as Subtract in Table 1)."
        ),
        FbClass::FtiC,
        infer_neg,
    ),
    unary(
        "tensor.exp",
        "elementwise natural exponential",
        concat!(
            "`y = exp(x)`, elementwise.\n\n",
            unary_rules!(),
            "**FBLayout class:** FTD-C: `dx = dy · y` needs the forward result `y`, read \
             elementwise as in the forward."
        ),
        FbClass::FtdC,
        infer_exp,
    ),
    unary(
        "tensor.log",
        "elementwise natural logarithm",
        concat!(
            "`y = ln(x)`, elementwise (IEEE: `ln(0) = -inf`, negative inputs give NaN).\n\n",
            unary_rules!(),
            "**FBLayout class:** FTD-C: `dx = dy / x` needs the forward input `x`, read \
             elementwise as in the forward."
        ),
        FbClass::FtdC,
        infer_log,
    ),
    unary(
        "tensor.sqrt",
        "elementwise square root",
        concat!(
            "`y = √x`, elementwise (IEEE: negative inputs give NaN).\n\n",
            unary_rules!(),
            "**FBLayout class:** FTD-C: `dx = dy / (2·y)` needs the forward result `y`, read \
             elementwise as in the forward."
        ),
        FbClass::FtdC,
        infer_sqrt,
    ),
    unary(
        "tensor.rsqrt",
        "elementwise reciprocal square root",
        concat!(
            "`y = 1/√x`, elementwise.\n\n",
            unary_rules!(),
            "**FBLayout class:** FTD-C: `dx = -dy · y³ / 2` needs the forward result `y`, read \
             elementwise as in the forward."
        ),
        FbClass::FtdC,
        infer_rsqrt,
    ),
    unary(
        "tensor.tanh",
        "elementwise hyperbolic tangent",
        concat!(
            "`y = tanh(x)`, elementwise.\n\n",
            unary_rules!(),
            "**FBLayout class:** FTD-C (paper Table 1): `dx = dy · (1 - y²)` \
             (`tensor.tanh_grad`) needs `y`, read elementwise."
        ),
        FbClass::FtdC,
        infer_tanh,
    ),
    unary(
        "tensor.sigmoid",
        "elementwise logistic sigmoid",
        concat!(
            "`y = 1 / (1 + exp(-x))`, elementwise.\n\n",
            unary_rules!(),
            "**FBLayout class:** FTD-C (paper Table 1): `dx = dy · y · (1 - y)` \
             (`tensor.sigmoid_grad`) needs `y`, read elementwise."
        ),
        FbClass::FtdC,
        infer_sigmoid,
    ),
    unary(
        "tensor.relu",
        "elementwise rectified linear unit",
        concat!(
            "`y = max(x, 0)`, elementwise.\n\n",
            unary_rules!(),
            "**FBLayout class:** FTD-C (paper Table 1): `dx = dy · 1[x > 0]` \
             (`tensor.relu_grad`) needs `x`, read elementwise."
        ),
        FbClass::FtdC,
        infer_relu,
    ),
    unary(
        "tensor.silu",
        "elementwise SiLU (swish): x·sigmoid(x)",
        concat!(
            "`y = x · sigmoid(x)`, elementwise.\n\n",
            unary_rules!(),
            "**FBLayout class:** FTD-C: `dx = dy · s · (1 + x · (1 - s))` with `s = sigmoid(x)` \
             (`tensor.silu_grad`) needs `x`, read elementwise as in the forward."
        ),
        FbClass::FtdC,
        infer_silu,
    ),
    OpDef {
        name: "tensor.gelu",
        summary: "elementwise GELU, erf form or tanh approximation",
        doc: concat!(
            "`approximate = \"none\"`: `y = x · Φ(x) = x/2 · (1 + erf(x/√2))`;\n\
             `approximate = \"tanh\"`: `y = x/2 · (1 + tanh(√(2/π) · (x + 0.044715·x³)))`.\n\n",
            unary_rules!(),
            "**Attributes:** `approximate` (string, `\"none\"` or `\"tanh\"`, default `\"none\"`).\n\n",
            "**FBLayout class:** FTD-C: `dx = dy · gelu'(x)` (`tensor.gelu_grad`) needs `x`, read \
             elementwise as in the forward."
        ),
        operands: Arity::Exactly(1),
        results: Arity::Exactly(1),
        attrs: &[APPROXIMATE],
        traits: OpTraits::ELEMENTWISE,
        class: Some(FbClass::FtdC),
        infer: infer_gelu,
    },
    OpDef {
        name: "tensor.scale",
        summary: "multiplies every element by a constant factor",
        doc: concat!(
            "`y = x · factor`, elementwise; `factor` is rounded to `x`'s element type.\n\n",
            unary_rules!(),
            "**Attributes:** `factor` (float, required; an integer literal is accepted).\n\n",
            "**FBLayout class:** FTI-C (paper Table 1): `dx = dy · factor` needs no forward \
             tensor; access is elementwise in both directions."
        ),
        operands: Arity::Exactly(1),
        results: Arity::Exactly(1),
        attrs: &[AttrDef::required("factor", AttrKind::Float, "the constant multiplier")],
        traits: OpTraits::ELEMENTWISE,
        class: Some(FbClass::FtiC),
        infer: infer_scale,
    },
];

/// Checks a broadcasting binary float op and infers its result.
pub(crate) fn binary_float(v: &OpView<'_>, name: &'static str) -> Result<Vec<Type>, OpError> {
    let cx = Ctx::new(v, name, &["a", "b"], Arity::Exactly(2))?;
    let a = cx.float_tensor(0)?;
    let b = cx.float_tensor(1)?;
    cx.same_elem(1, b, 0)?;
    let shape = cx.broadcast2(a, b)?;
    cx.done(vec![TensorType::new(shape, a.elem)])
}

/// Checks a unary float op and infers its result (the operand's type).
fn unary_float(v: &OpView<'_>, name: &'static str) -> Result<Vec<Type>, OpError> {
    let cx = Ctx::new(v, name, &["x"], Arity::Exactly(1))?;
    let x = cx.float_tensor(0)?;
    cx.done(vec![x.clone()])
}

infer_fns! {
    infer_add => binary_float("tensor.add"),
    infer_sub => binary_float("tensor.sub"),
    infer_mul => binary_float("tensor.mul"),
    infer_div => binary_float("tensor.div"),
    infer_max => binary_float("tensor.max"),
    infer_min => binary_float("tensor.min"),
    infer_pow => binary_float("tensor.pow"),
    infer_erf => unary_float("tensor.erf"),
    infer_neg => unary_float("tensor.neg"),
    infer_exp => unary_float("tensor.exp"),
    infer_log => unary_float("tensor.log"),
    infer_sqrt => unary_float("tensor.sqrt"),
    infer_rsqrt => unary_float("tensor.rsqrt"),
    infer_tanh => unary_float("tensor.tanh"),
    infer_sigmoid => unary_float("tensor.sigmoid"),
    infer_relu => unary_float("tensor.relu"),
    infer_silu => unary_float("tensor.silu"),
}

const FLOAT_TYPES: &[&str] = &["f32", "f16", "bf16", "f64"];

fn infer_cast(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    let cx = Ctx::new(v, "tensor.cast", &["x"], Arity::Exactly(1))?;
    let x = cx.float_tensor(0)?;
    let name = cx.str("dtype", AttrKind::Enum(FLOAT_TYPES), "f32")?;
    let elem = fbc_ir::ElemType::parse(name)
        .ok_or_else(|| OpError::new(format!("unknown element type `{name}`")))?;
    cx.done(vec![TensorType::new(x.shape.clone(), elem)])
}

fn infer_select(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    let cx = Ctx::new(v, "tensor.select", &["mask", "a", "b"], Arity::Exactly(3))?;
    let m = cx.float_tensor(0)?;
    let a = cx.float_tensor(1)?;
    let b = cx.float_tensor(2)?;
    cx.same_elem(1, a, 0)?;
    cx.same_elem(2, b, 0)?;
    let ma = TensorType::new(cx.broadcast2(m, a)?, m.elem);
    let shape = cx.broadcast2(&ma, b)?;
    cx.done(vec![TensorType::new(shape, m.elem)])
}

fn infer_gelu(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    let cx = Ctx::new(v, "tensor.gelu", &["x"], Arity::Exactly(1))?;
    let x = cx.float_tensor(0)?;
    cx.str("approximate", APPROXIMATE.kind, "none")?;
    cx.done(vec![x.clone()])
}

fn infer_scale(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    let cx = Ctx::new(v, "tensor.scale", &["x"], Arity::Exactly(1))?;
    let x = cx.float_tensor(0)?;
    cx.req_float("factor")?;
    cx.done(vec![x.clone()])
}
