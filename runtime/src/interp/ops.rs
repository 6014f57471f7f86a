//! The dispatch table: one entry per op name, mapping an IR op to its reference kernel.
//!
//! **Adding an op** (the `layout.*` ops, say) is one line in [`kernel`] plus, unless an existing
//! adapter fits, one small generic function here that reads the operands and attributes from an
//! [`OpCx`] and calls the kernel. `func.call` and `func.return` are not in the table: they act on
//! frames and live in the interpreter loop (`mod.rs`).
//!
//! An entry says which element types the op runs on: [`Kernel::Float`] ops compute in `f32` or
//! `f64`; [`Kernel::Any`] ops (data movement, constants) also move `i32`. Which one runs is
//! decided by the storage of the op's first result type in the current mode (see `value.rs`), so
//! a kernel never guesses types from its operands. After a kernel returns, [`execute`] checks
//! every result against the op's declared result type and rounds f16/bf16 results.

use fbc_dialects::kind::OpKind;
use fbc_ir::{Attr, Module, OpData, Type};

use super::error::InterpError;
use super::value::{Elem, FloatElem, Mode, Storage, Value};
use crate::reference::{self as r, GeluApproximation, KernelError, Tensor};

/// What a kernel adapter returns: one tensor per op result.
pub(crate) type Out<T> = Result<Vec<Tensor<T>>, Fail>;

/// Why an adapter failed; [`execute`] adds the op's name and span.
#[derive(Debug)]
pub(crate) enum Fail {
    Kernel(KernelError),
    Message(String),
}

impl From<KernelError> for Fail {
    fn from(e: KernelError) -> Fail {
        Fail::Kernel(e)
    }
}

/// The adapters of one op, one per element type it runs on.
#[derive(Clone, Copy)]
pub(crate) enum Kernel {
    /// Computes in the float storage of its result: `f32` or `f64`.
    Float { f32: fn(&OpCx<'_>) -> Out<f32>, f64: fn(&OpCx<'_>) -> Out<f64> },
    /// Moves or creates data of any storage, `i32` included.
    Any {
        f32: fn(&OpCx<'_>) -> Out<f32>,
        f64: fn(&OpCx<'_>) -> Out<f64>,
        i32: fn(&OpCx<'_>) -> Out<i32>,
    },
}

macro_rules! float {
    ($f:ident) => {
        Kernel::Float { f32: $f::<f32>, f64: $f::<f64> }
    };
}

macro_rules! any {
    ($f:ident) => {
        Kernel::Any { f32: $f::<f32>, f64: $f::<f64>, i32: $f::<i32> }
    };
}

/// The kernel of an op of kind `kind`: every tensor and layout op has one; `None` for the ops
/// the interpreter runs itself (calls, returns, the memory ops: `mod.rs`, `memory_ops.rs`).
pub(crate) fn kernel(kind: OpKind) -> Option<Kernel> {
    use fbc_dialects::kind::{LayoutOp as L, TensorOp as T};
    let t = match kind {
        OpKind::Tensor(t) => t,
        OpKind::Layout(L::Assign | L::Convert) => return Some(any!(identity)),
        OpKind::Layout(L::Remap) => return Some(any!(remap)),
        OpKind::Func(_) | OpKind::Memory(_) => return None,
    };
    Some(match t {
        T::Constant => any!(constant),
        // Elementwise.
        T::Add => float!(add),
        T::Sub => float!(sub),
        T::Mul => float!(mul),
        T::Div => float!(div),
        T::Max => float!(max),
        T::Min => float!(min),
        T::Pow => float!(pow),
        T::Select => float!(select),
        T::Cast => float!(cast),
        T::Erf => float!(erf),
        T::Neg => float!(neg),
        T::Exp => float!(exp),
        T::Log => float!(log),
        T::Sqrt => float!(sqrt),
        T::Rsqrt => float!(rsqrt),
        T::Tanh => float!(tanh),
        T::Sigmoid => float!(sigmoid),
        T::Relu => float!(relu),
        T::Silu => float!(silu),
        T::Gelu => float!(gelu),
        T::Scale => float!(scale),
        // Matmul, reductions, normalisations.
        T::Matmul => float!(matmul),
        T::ReduceSum => float!(reduce_sum),
        T::ReduceMax => float!(reduce_max),
        T::ReduceMean => float!(reduce_mean),
        T::Softmax => float!(softmax),
        T::Layernorm => float!(layernorm),
        T::Rmsnorm => float!(rmsnorm),
        T::Rope => float!(rope),
        T::Embedding => float!(embedding),
        T::CrossEntropy => float!(cross_entropy),
        T::CausalMask => float!(causal_mask),
        T::Attention => float!(attention),
        T::Conv2d => float!(conv2d),
        T::GroupNorm => float!(group_norm),
        T::Upsample => float!(upsample),
        T::Dequantize => float!(dequantize),
        // Data movement.
        T::Reshape => any!(reshape),
        T::Transpose => any!(transpose),
        T::Broadcast => any!(broadcast),
        T::Slice => any!(slice),
        T::Concat => any!(concat),
        T::UpdateSlice => any!(update_slice),
        // Backward helpers.
        T::SoftmaxGrad => float!(softmax_grad),
        T::LayernormGrad => float!(layernorm_grad),
        T::RmsnormGrad => float!(rmsnorm_grad),
        T::GeluGrad => float!(gelu_grad),
        T::SiluGrad => float!(silu_grad),
        T::SigmoidGrad => float!(sigmoid_grad),
        T::TanhGrad => float!(tanh_grad),
        T::ReluGrad => float!(relu_grad),
        T::RopeGrad => float!(rope_grad),
        T::CrossEntropyGrad => float!(cross_entropy_grad),
        T::EmbeddingGrad => float!(embedding_grad),
        T::Conv2dGradInput => float!(conv2d_grad_input),
        T::Conv2dGradWeight => float!(conv2d_grad_weight),
        T::GroupNormGrad => float!(group_norm_grad),
        T::Unbroadcast => float!(unbroadcast),
        T::SliceGrad => float!(slice_grad),
        T::Ge => float!(ge),
    })
}

/// What an adapter sees: the op, its operand values, and the storage of its first result.
pub(crate) struct OpCx<'a> {
    pub(crate) op: &'a OpData,
    pub(crate) module: &'a Module,
    pub(crate) args: &'a [&'a Value],
    pub(crate) storage: Storage,
}

impl OpCx<'_> {
    /// Operand `i` as a tensor of `T` (the verifier and [`Storage`] guarantee the match; a
    /// mismatch is an interpreter bug, reported, not a panic).
    fn x<T: Elem>(&self, i: usize) -> Result<&Tensor<T>, Fail> {
        let v = self.args.get(i).ok_or_else(|| Fail::Message(format!("missing operand {i}")))?;
        T::unwrap(v).ok_or_else(|| {
            Fail::Message(format!(
                "internal: operand {i} holds {} data where {} was expected",
                v.storage_name(),
                T::NAME
            ))
        })
    }

    /// Operand `i`, an i32 tensor of ids or labels.
    fn ids(&self, i: usize) -> Result<&Tensor<i32>, Fail> {
        self.x::<i32>(i)
    }

    fn attr(&self, name: &str) -> Option<&Attr> {
        self.op.attr(name)
    }

    fn bad_attr(&self, name: &str, want: &str) -> Fail {
        match self.attr(name) {
            None => Fail::Message(format!("missing attribute `{name}` ({want})")),
            Some(a) => Fail::Message(format!("attribute `{name}` must be {want}, found `{a}`")),
        }
    }

    fn bool(&self, name: &str, default: bool) -> Result<bool, Fail> {
        match self.attr(name) {
            None => Ok(default),
            Some(a) => a.as_bool().ok_or_else(|| self.bad_attr(name, "a boolean")),
        }
    }

    fn int(&self, name: &str, default: Option<i64>) -> Result<i64, Fail> {
        match (self.attr(name), default) {
            (None, Some(d)) => Ok(d),
            (a, _) => a.and_then(Attr::as_int).ok_or_else(|| self.bad_attr(name, "an integer")),
        }
    }

    fn float(&self, name: &str, default: Option<f64>) -> Result<f64, Fail> {
        match (self.attr(name), default) {
            (None, Some(d)) => Ok(d),
            (a, _) => a.and_then(Attr::as_float).ok_or_else(|| self.bad_attr(name, "a float")),
        }
    }

    fn ints(&self, name: &str) -> Result<Vec<i64>, Fail> {
        self.attr(name)
            .and_then(Attr::as_ints)
            .ok_or_else(|| self.bad_attr(name, "an integer array"))
    }

    /// An integer-array attribute whose entries are all ≥ 0.
    fn usizes(&self, name: &str) -> Result<Vec<usize>, Fail> {
        self.ints(name)?
            .into_iter()
            .map(|v| usize::try_from(v).map_err(|_| self.bad_attr(name, "non-negative integers")))
            .collect()
    }

    fn gelu_approximation(&self) -> Result<GeluApproximation, Fail> {
        match self.attr("approximate") {
            None => Ok(GeluApproximation::None),
            Some(a) => {
                let s = a.as_str().ok_or_else(|| self.bad_attr("approximate", "a string"))?;
                Ok(s.parse()?)
            }
        }
    }

    /// The resolved convolution attributes of a `tensor.conv2d*` op whose kernel is `[KH, KW]`
    /// (the verifier has checked them; a failure here is reported, not a panic).
    fn conv_params(&self, kernel: &[usize]) -> Result<r::Conv2dParams, Fail> {
        let a = fbc_dialects::tensor::Conv2dAttrs::read(self.op.name(), |n| self.attr(n))
            .map_err(|e| Fail::Message(e.message))?;
        let [kh, kw] = kernel else {
            return Err(Fail::Message(format!("a kernel of shape {kernel:?}")));
        };
        let size = |v: u64| {
            usize::try_from(v).map_err(|_| Fail::Message(format!("{v} does not fit in usize")))
        };
        let k = [*kh as u64, *kw as u64];
        let [t, l, b, rt] = a.pads(k);
        Ok(r::Conv2dParams {
            stride: [size(a.stride[0])?, size(a.stride[1])?],
            padding: [size(t)?, size(l)?, size(b)?, size(rt)?],
            dilation: [size(a.dilation[0])?, size(a.dilation[1])?],
            groups: size(a.groups)?,
        })
    }

    /// `groups` and `eps` of a group norm or its gradient.
    fn group_norm_attrs(&self) -> Result<(usize, f64), Fail> {
        let groups = self.int("groups", None)?;
        let groups =
            usize::try_from(groups).map_err(|_| self.bad_attr("groups", "an integer ≥ 1"))?;
        Ok((groups, self.float("eps", Some(DEFAULT_EPS))?))
    }

    /// The shape of result `i`, from its declared type.
    fn result_shape(&self, i: usize) -> Result<Vec<usize>, Fail> {
        let t = self.op.results.get(i).map(|&v| self.module.value_type(v));
        match t {
            Some(Type::Tensor(t)) => t
                .shape
                .iter()
                .map(|&d| {
                    usize::try_from(d).map_err(|_| Fail::Message(format!("{t} is too large")))
                })
                .collect(),
            _ => Err(Fail::Message(format!("result {i} is not a tensor"))),
        }
    }
}

// ----- adapters -----

fn constant<T: Elem>(cx: &OpCx<'_>) -> Out<T> {
    let shape = cx.result_shape(0)?;
    if let Some(d) = cx.attr("value").and_then(Attr::as_dense) {
        let elem = match cx.op.results.first().map(|&v| cx.module.value_type(v)) {
            Some(Type::Tensor(t)) => t.elem,
            _ => return Err(Fail::Message("result 0 is not a tensor".into())),
        };
        let values = d.decode(elem).map_err(Fail::Message)?;
        if let [v] = values[..] {
            return Ok(vec![Tensor::full(&shape, T::from_f64(cx.storage.round_scalar(v)))?]);
        }
        let data = values.into_iter().map(|v| T::from_f64(cx.storage.round_scalar(v))).collect();
        return Ok(vec![Tensor::new(shape, data)?]);
    }
    // Rounded as the result stores it, so an f16 constant is the f16 nearest `value`.
    let v = cx.storage.round_scalar(cx.float("value", None)?);
    Ok(vec![Tensor::full(&shape, T::from_f64(v))?])
}

/// Adapters `fn(cx) -> Ok(vec![kernel(x0, x1)?])` for the broadcasting binary kernels.
macro_rules! binary {
    ($($name:ident => $kernel:path),* $(,)?) => {
        $(fn $name<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
            Ok(vec![$kernel(cx.x::<T>(0)?, cx.x::<T>(1)?)?])
        })*
    };
}

/// Adapters `fn(cx) -> Ok(vec![kernel(x0)])` for the infallible unary kernels.
macro_rules! unary {
    ($($name:ident => $kernel:path),* $(,)?) => {
        $(fn $name<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
            Ok(vec![$kernel(cx.x::<T>(0)?)])
        })*
    };
}

/// Adapters `fn(cx) -> Ok(vec![kernel(x0, x1)?])` for the elementwise gradient kernels.
macro_rules! pointwise_grad {
    ($($name:ident => $kernel:path),* $(,)?) => {
        $(fn $name<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
            Ok(vec![$kernel(cx.x::<T>(0)?, cx.x::<T>(1)?)?])
        })*
    };
}

binary! {
    add => r::add, sub => r::sub, mul => r::mul, div => r::div, max => r::max, min => r::min,
    pow => r::pow,
}

/// `tensor.cast`: the operand's values in the result's storage (f16/bf16 rounding is applied
/// by [`execute`] as for every result).
fn cast<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    let x = cx.args.first().ok_or_else(|| Fail::Message("missing operand 0".into()))?;
    let data = x.to_f64_vec().into_iter().map(T::from_f64).collect();
    Ok(vec![Tensor::new(x.shape().to_vec(), data)?])
}

fn select<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    Ok(vec![r::select(cx.x::<T>(0)?, cx.x::<T>(1)?, cx.x::<T>(2)?)?])
}

unary! {
    neg => r::neg, exp => r::exp, log => r::log, sqrt => r::sqrt, rsqrt => r::rsqrt,
    tanh => r::tanh, sigmoid => r::sigmoid, relu => r::relu, silu => r::silu, erf => r::erf,
}

pointwise_grad! {
    silu_grad => r::silu_grad, sigmoid_grad => r::sigmoid_grad, tanh_grad => r::tanh_grad,
    relu_grad => r::relu_grad,
}

fn gelu<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    Ok(vec![r::gelu(cx.x::<T>(0)?, cx.gelu_approximation()?)])
}

fn scale<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    // The dialect rounds `factor` to the operand's element type (f16 included).
    let factor = cx.storage.round_scalar(cx.float("factor", None)?);
    Ok(vec![r::scale(cx.x::<T>(0)?, factor)])
}

fn matmul<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    let (ta, tb) = (cx.bool("transpose_a", false)?, cx.bool("transpose_b", false)?);
    Ok(vec![r::matmul(cx.x::<T>(0)?, cx.x::<T>(1)?, ta, tb)?])
}

fn reduce_sum<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    Ok(vec![r::reduce_sum(cx.x::<T>(0)?, &cx.ints("axes")?, cx.bool("keepdim", false)?)?])
}

fn reduce_max<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    Ok(vec![r::reduce_max(cx.x::<T>(0)?, &cx.ints("axes")?, cx.bool("keepdim", false)?)?])
}

fn reduce_mean<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    Ok(vec![r::reduce_mean(cx.x::<T>(0)?, &cx.ints("axes")?, cx.bool("keepdim", false)?)?])
}

fn softmax<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    Ok(vec![r::softmax(cx.x::<T>(0)?, cx.int("axis", Some(-1))?)?])
}

/// The dialect's default `eps` of normalisations.
const DEFAULT_EPS: f64 = 1e-5;

fn layernorm<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    let (axis, eps) = (cx.int("axis", Some(-1))?, cx.float("eps", Some(DEFAULT_EPS))?);
    Ok(vec![r::layernorm(cx.x::<T>(0)?, cx.x::<T>(1)?, cx.x::<T>(2)?, axis, eps)?])
}

fn rmsnorm<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    let eps = cx.float("eps", Some(DEFAULT_EPS))?;
    Ok(vec![r::rmsnorm(cx.x::<T>(0)?, cx.x::<T>(1)?, eps)?])
}

/// The kernel size `[KH, KW]` of a weight shape `[O, C/groups, KH, KW]`.
fn kernel_of(w: &[usize]) -> &[usize] {
    w.get(2..).unwrap_or(&[])
}

fn conv2d<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    let w = cx.x::<T>(1)?;
    let bias = if cx.args.len() > 2 { Some(cx.x::<T>(2)?) } else { None };
    let p = cx.conv_params(kernel_of(w.shape()))?;
    Ok(vec![r::conv2d(cx.x::<T>(0)?, w, bias, &p)?])
}

fn group_norm<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    let (groups, eps) = cx.group_norm_attrs()?;
    Ok(vec![r::group_norm(cx.x::<T>(0)?, cx.x::<T>(1)?, cx.x::<T>(2)?, groups, eps)?])
}

fn upsample<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    let scale = cx.int("scale", Some(2))?;
    let scale = usize::try_from(scale).map_err(|_| cx.bad_attr("scale", "an integer ≥ 1"))?;
    Ok(vec![r::upsample(cx.x::<T>(0)?, scale)?])
}

fn rope<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    Ok(vec![r::rope(cx.x::<T>(0)?, cx.x::<T>(1)?, cx.x::<T>(2)?)?])
}

fn embedding<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    Ok(vec![r::embedding(cx.x::<T>(0)?, cx.ids(1)?)?])
}

/// `tensor.dequantize`: decoded in f32 by [`r::dequantize`] (`q · s` in f32, as kernels reading
/// packed weights compute it), then held as `T` (exactly: f64 widens).
fn dequantize<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    let scheme = match cx.attr("scheme").and_then(Attr::as_str) {
        Some("int8") => crate::weights::Quant::Int8,
        Some("int4") => crate::weights::Quant::Int4,
        _ => return Err(cx.bad_attr("scheme", "\"int8\" or \"int4\"")),
    };
    let size = |name: &str, v: i64| {
        usize::try_from(v).map_err(|_| cx.bad_attr(name, "a non-negative integer"))
    };
    let group = size("group", cx.int("group", None)?)?;
    let packed = cx.ids(0)?;
    let bytes = packed.shape().last().copied().unwrap_or(0) as i64;
    let default = if scheme == crate::weights::Quant::Int4 { 2 * bytes } else { bytes };
    let cols = size("cols", cx.int("cols", Some(default))?)?;
    let scales = cx.x::<T>(1)?;
    let scales = Tensor::new(
        scales.shape().to_vec(),
        scales.data().iter().map(|s| s.as_f64() as f32).collect(),
    )?;
    let w = r::dequantize(packed, &scales, scheme, group, cols)?;
    let data = w.data().iter().map(|&v| T::lit(f64::from(v))).collect();
    Ok(vec![Tensor::new(w.shape().to_vec(), data)?])
}

fn cross_entropy<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    Ok(vec![r::cross_entropy(cx.x::<T>(0)?, cx.ids(1)?)?])
}

/// Element 0 of the `tensor<i32>` operand `i`: the position of `causal_mask` and `attention`.
fn position(cx: &OpCx<'_>, i: usize) -> Result<i64, Fail> {
    let p = cx
        .ids(i)?
        .data()
        .first()
        .copied()
        .ok_or_else(|| Fail::Message(format!("the position (operand {i}) holds no element")))?;
    Ok(p.into())
}

fn causal_mask<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    let shape = cx.usizes("shape")?;
    let [s, m] = shape[..] else { return Err(cx.bad_attr("shape", "[S, M]")) };
    let window = u64::try_from(cx.int("window", Some(0))?).unwrap_or(0);
    Ok(vec![r::causal_mask(position(cx, 0)?, s, m, window)?])
}

fn attention<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    let (rope, causal) = (cx.bool("rope", false)?, cx.bool("causal", false)?);
    let pos = if causal {
        let p = position(cx, cx.args.len() - 1)?;
        if p < 0 {
            return Err(Fail::Message(format!(
                "the position {p} is negative; attention's queries sit at positions ≥ 0"
            )));
        }
        Some(p)
    } else {
        None
    };
    let o = r::AttentionOptions {
        scale: cx.float("scale", None)?,
        softcap: cx.float("softcap", Some(0.0))?,
        causal: pos,
        window: u64::try_from(cx.int("window", Some(0))?).unwrap_or(0),
    };
    let tables = if rope { Some((cx.x::<T>(3)?, cx.x::<T>(4)?)) } else { None };
    Ok(vec![r::attention(cx.x::<T>(0)?, cx.x::<T>(1)?, cx.x::<T>(2)?, tables, o)?])
}

fn reshape<T: Elem>(cx: &OpCx<'_>) -> Out<T> {
    // The declared result type has the `-1` of `shape` resolved already.
    Ok(vec![r::reshape(cx.x::<T>(0)?, &cx.result_shape(0)?)?])
}

fn transpose<T: Elem>(cx: &OpCx<'_>) -> Out<T> {
    Ok(vec![r::transpose(cx.x::<T>(0)?, &cx.usizes("perm")?)?])
}

fn broadcast<T: Elem>(cx: &OpCx<'_>) -> Out<T> {
    Ok(vec![r::broadcast(cx.x::<T>(0)?, &cx.usizes("shape")?)?])
}

fn slice<T: Elem>(cx: &OpCx<'_>) -> Out<T> {
    Ok(vec![r::slice(cx.x::<T>(0)?, &cx.usizes("start")?, &cx.usizes("end")?)?])
}

fn concat<T: Elem>(cx: &OpCx<'_>) -> Out<T> {
    let xs = (0..cx.args.len()).map(|i| cx.x::<T>(i)).collect::<Result<Vec<_>, _>>()?;
    Ok(vec![r::concat(&xs, cx.int("axis", None)?)?])
}

fn update_slice<T: Elem>(cx: &OpCx<'_>) -> Out<T> {
    let offset = cx.ids(2)?.data().first().copied().ok_or_else(|| {
        Fail::Message("the offset of tensor.update_slice holds no element".into())
    })?;
    let out = r::update_slice(cx.x::<T>(0)?, cx.x::<T>(1)?, cx.int("axis", None)?, offset.into())?;
    Ok(vec![out])
}

fn softmax_grad<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    Ok(vec![r::softmax_grad(cx.x::<T>(0)?, cx.x::<T>(1)?, cx.int("axis", Some(-1))?)?])
}

fn layernorm_grad<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    let (axis, eps) = (cx.int("axis", Some(-1))?, cx.float("eps", Some(DEFAULT_EPS))?);
    let (dx, dgamma, dbeta) =
        r::layernorm_grad(cx.x::<T>(0)?, cx.x::<T>(1)?, cx.x::<T>(2)?, axis, eps)?;
    Ok(vec![dx, dgamma, dbeta])
}

fn rmsnorm_grad<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    let eps = cx.float("eps", Some(DEFAULT_EPS))?;
    let (dx, dgamma) = r::rmsnorm_grad(cx.x::<T>(0)?, cx.x::<T>(1)?, cx.x::<T>(2)?, eps)?;
    Ok(vec![dx, dgamma])
}

fn conv2d_grad_input<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    let w = cx.x::<T>(1)?;
    let p = cx.conv_params(kernel_of(w.shape()))?;
    Ok(vec![r::conv2d_grad_input(cx.x::<T>(0)?, w, &cx.usizes("shape")?, &p)?])
}

fn conv2d_grad_weight<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    let shape = cx.usizes("shape")?;
    let p = cx.conv_params(kernel_of(&shape))?;
    Ok(vec![r::conv2d_grad_weight(cx.x::<T>(0)?, cx.x::<T>(1)?, &shape, &p)?])
}

fn group_norm_grad<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    let (groups, eps) = cx.group_norm_attrs()?;
    let (dx, dgamma, dbeta) =
        r::group_norm_grad(cx.x::<T>(0)?, cx.x::<T>(1)?, cx.x::<T>(2)?, groups, eps)?;
    Ok(vec![dx, dgamma, dbeta])
}

fn gelu_grad<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    Ok(vec![r::gelu_grad(cx.x::<T>(0)?, cx.x::<T>(1)?, cx.gelu_approximation()?)?])
}

fn rope_grad<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    Ok(vec![r::rope_grad(cx.x::<T>(0)?, cx.x::<T>(1)?, cx.x::<T>(2)?)?])
}

fn cross_entropy_grad<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    Ok(vec![r::cross_entropy_grad(cx.x::<T>(0)?, cx.ids(1)?, cx.x::<T>(2)?)?])
}

fn embedding_grad<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    let vocab = cx.int("vocab", None)?;
    let vocab = usize::try_from(vocab).map_err(|_| cx.bad_attr("vocab", "a size ≥ 1"))?;
    Ok(vec![r::embedding_grad(cx.ids(0)?, cx.x::<T>(1)?, vocab)?])
}

fn unbroadcast<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    Ok(vec![r::reduce_to_shape(cx.x::<T>(0)?, &cx.usizes("shape")?)?])
}

fn slice_grad<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    Ok(vec![r::slice_grad(cx.x::<T>(0)?, &cx.usizes("shape")?, &cx.usizes("start")?)?])
}

fn ge<T: FloatElem>(cx: &OpCx<'_>) -> Out<T> {
    // `>=` is false when either side is NaN, giving 0.
    let out = cx.x::<T>(0)?.zip(cx.x::<T>(1)?, |a, b| if a >= b { T::one() } else { T::zero() })?;
    Ok(vec![out])
}

fn identity<T: Elem>(cx: &OpCx<'_>) -> Out<T> {
    Ok(vec![cx.x::<T>(0)?.clone()])
}

fn remap<T: Elem>(cx: &OpCx<'_>) -> Out<T> {
    let x = cx.x::<T>(0)?;
    let Some(Attr::Map(map)) = cx.attr("map") else {
        return Err(cx.bad_attr("map", "an index map"));
    };
    let shape = cx.result_shape(0)?;
    // `y[i] = x[map(i)]`, checked per element: the verifier only checks the corners.
    let mut failure: Option<String> = None;
    let y = Tensor::from_fn(&shape, |i| {
        if failure.is_some() {
            return T::default();
        }
        let idx: Vec<i64> = i.iter().map(|&k| k as i64).collect();
        let src = fbc_dialects::layout::remap_source_index(map, &idx).and_then(|s| {
            s.iter().map(|&v| usize::try_from(v).ok()).collect::<Option<Vec<usize>>>()
        });
        match src.as_deref().map(|s| (s, x.get(s))) {
            Some((_, Ok(v))) => v,
            found => {
                failure = Some(match found {
                    Some((s, _)) => format!(
                        "result index {i:?} reads x{s:?}, outside x's shape {:?}",
                        x.shape()
                    ),
                    None => format!(
                        "the map is undefined or negative at result index {i:?} (x is {:?})",
                        x.shape()
                    ),
                });
                T::default()
            }
        }
    })?;
    match failure {
        Some(m) => Err(Fail::Message(m)),
        None => Ok(vec![y]),
    }
}

// ----- execution -----

/// Runs `op` on `args` in `mode`: picks the adapter for the storage of its first result, checks
/// every result against its declared type, and rounds f16/bf16 results.
pub(crate) fn execute(
    module: &Module,
    op: &OpData,
    args: &[&Value],
    mode: Mode,
) -> Result<Vec<Value>, InterpError> {
    let name = op.name();
    let unsupported =
        |reason: String| InterpError::Unsupported { op: name.to_string(), reason, span: op.span };
    let failed = |message: String| InterpError::Op { op: name.to_string(), message, span: op.span };
    let Some(kernel) = OpKind::of_op(op).and_then(kernel) else {
        return Err(unsupported(
            "no kernel for this op; add one to the table in runtime/src/interp/ops.rs".into(),
        ));
    };
    // The storage of every result, from its declared type.
    let mut storages = Vec::with_capacity(op.results.len());
    for (i, &r) in op.results.iter().enumerate() {
        match module.value_type(r) {
            Type::Tensor(t) => match Storage::of(t.elem, mode) {
                Some(s) => storages.push((s, t)),
                None => {
                    return Err(unsupported(format!(
                        "result {i} is {t}, and the interpreter stores only f32, f16, bf16, f64 \
                         and i32 tensors"
                    )))
                }
            },
            other => return Err(unsupported(format!("result {i} is {other}, not a tensor"))),
        }
    }
    let Some(&(storage, _)) = storages.first() else {
        return Err(unsupported("the op has no results".into()));
    };
    let cx = OpCx { op, module, args, storage };
    let outs: Result<Vec<Value>, Fail> = match (kernel, storage) {
        (Kernel::Float { f32, .. } | Kernel::Any { f32, .. }, Storage::F32(_)) => {
            f32(&cx).map(|v| v.into_iter().map(Value::F32).collect())
        }
        (Kernel::Float { f64, .. } | Kernel::Any { f64, .. }, Storage::F64) => {
            f64(&cx).map(|v| v.into_iter().map(Value::F64).collect())
        }
        (Kernel::Any { i32, .. }, Storage::I32) => {
            i32(&cx).map(|v| v.into_iter().map(Value::I32).collect())
        }
        (Kernel::Float { .. }, Storage::I32) => {
            Err(Fail::Message("internal: a float op with an i32 result".into()))
        }
    };
    let outs = outs.map_err(|f| match f {
        Fail::Kernel(source) => InterpError::Kernel { op: name.to_string(), source, span: op.span },
        Fail::Message(m) => failed(m),
    })?;
    if outs.len() != storages.len() {
        return Err(failed(format!(
            "internal: the kernel made {} results for {} declared",
            outs.len(),
            storages.len()
        )));
    }
    // A kernel result that disagrees with the declared type would make every later op (and any
    // translation validation built on this interpreter) meaningless: check, never assume.
    outs.into_iter()
        .zip(storages)
        .enumerate()
        .map(|(i, (v, (s, t)))| {
            let same = v.shape().iter().map(|&d| d as u64).eq(t.shape.iter().copied());
            if same {
                Ok(s.round(v))
            } else {
                Err(failed(format!(
                    "internal: result {i} has shape {:?}, but its type is {t}",
                    v.shape()
                )))
            }
        })
        .collect()
}
