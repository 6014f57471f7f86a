//! The gradient rule of every differentiable op: given the forward op and `dy`, the gradient of
//! the loss with respect to its result, build the vector-Jacobian products for the operands that
//! need one. Rules only build what is asked for (`active`), return each operand's gradient in that
//! operand's own type (broadcasting is undone with `tensor.unbroadcast`), and read forward values
//! (operands and results) freely: those reads are the paper's `E_reuse` edges, marked afterwards.

use fbc_dialects::kind::TensorOp as T;
use fbc_ir::{Attr, Diagnostic, Module, Op, OpData, OpDef, TensorType, Value};

use super::emit::{dims_attr, internal, Emitter};

/// The tensor ops autodiff never differentiates through: a constant has no operand, the
/// backward helpers are what rules build (fbc computes no second derivatives), and quantised
/// weights (`dequantize`) are frozen. A pattern, so
/// that [`has_rule`] and [`apply`] share one list.
macro_rules! no_rule {
    () => {
        fbc_dialects::tensor_vjps!()
            | T::Constant
            | T::UpdateSlice
            | T::CausalMask
            | T::Attention
            | T::Dequantize
    };
}

/// Whether autodiff can differentiate through an op of definition `def` (`func.call` is
/// inlined before rules run; layout and memory ops do not appear in the graphs it reads).
pub(crate) fn has_rule(def: &OpDef) -> bool {
    T::of(def).is_some_and(|t| !matches!(t, no_rule!()))
}

/// The rank-0 tensor type of `v`'s element type (a scalar constant that broadcasts against it).
fn scalar_like(m: &Module, v: Value) -> fbc_ir::Type {
    let elem = match m.value_type(v) {
        fbc_ir::Type::Tensor(t) => t.elem,
        _ => fbc_ir::ElemType::F32,
    };
    fbc_ir::Type::Tensor(TensorType::new(Vec::<u64>::new(), elem))
}

/// The listed attributes of `d` that are present, copied (the forward op's `axis`, `eps`, ...).
fn copy_attrs(d: &OpData, names: &[&str]) -> Vec<(String, Attr)> {
    names.iter().filter_map(|&n| d.attr(n).map(|a| (n.to_string(), a.clone()))).collect()
}

fn bool_attr(d: &OpData, name: &str) -> bool {
    d.attr(name).and_then(Attr::as_bool).unwrap_or(false)
}

/// `axis` (possibly negative) as an index into `rank` axes.
fn normalize_axis(e: &Emitter<'_>, axis: i64, rank: usize) -> Result<usize, Diagnostic> {
    let r = i64::try_from(rank).unwrap_or(i64::MAX);
    let a = if axis < 0 { axis + r } else { axis };
    usize::try_from(a)
        .ok()
        .filter(|&a| a < rank)
        .ok_or_else(|| internal(e.span, format!("axis {axis} out of range for rank {rank}")))
}

fn u64_to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Builds the gradients of `op`'s operands from `dy`, the gradient of its (single) result.
/// `active[i]` says whether operand `i` needs one. Returns `(operand index, gradient)` pairs; an
/// operand may appear more than once, and the caller sums.
pub(crate) fn apply(
    e: &mut Emitter<'_>,
    m: &mut Module,
    op: Op,
    dy: Value,
    active: &[bool],
) -> Result<Vec<(usize, Value)>, Diagnostic> {
    let d = m.op(op).clone();
    let want = |i: usize| active.get(i).copied().unwrap_or(false);
    let x =
        |i: usize| d.operands.get(i).copied().ok_or_else(|| internal(d.span, "missing operand"));
    let y = *d.results.first().ok_or_else(|| internal(d.span, "missing result"))?;
    let mut out: Vec<(usize, Value)> = Vec::new();
    let no_rule = || internal(d.span, format!("no gradient rule for `{}`", d.name()));
    // Every tensor op has an arm: a new op is differentiated here or listed in `no_rule!`.
    let Some(kind) = T::of(d.def) else { return Err(no_rule()) };
    match kind {
        T::Add => {
            for i in 0..2 {
                if want(i) {
                    out.push((i, e.unbroadcast_like(m, dy, x(i)?)?));
                }
            }
        }
        T::Sub => {
            if want(0) {
                out.push((0, e.unbroadcast_like(m, dy, x(0)?)?));
            }
            if want(1) {
                let g = e.unbroadcast_like(m, dy, x(1)?)?;
                out.push((1, e.unary(m, T::Neg, g)?));
            }
        }
        T::Mul => {
            let (a, b) = (x(0)?, x(1)?);
            if a == b && want(0) {
                // x·x (a squared error): one `2·dy·x` instead of two products and a sum.
                let g = e.binary(m, T::Mul, dy, a)?;
                let g = e.unbroadcast_like(m, g, a)?;
                out.push((0, e.scale(m, g, 2.0)?));
                return Ok(out);
            }
            if want(0) {
                let g = e.binary(m, T::Mul, dy, b)?;
                out.push((0, e.unbroadcast_like(m, g, a)?));
            }
            if want(1) {
                let g = e.binary(m, T::Mul, dy, a)?;
                out.push((1, e.unbroadcast_like(m, g, b)?));
            }
        }
        T::Div => {
            // y = a / b: da = dy / b, db = -dy · a / b² = -(dy / b) · y.
            let (a, b) = (x(0)?, x(1)?);
            let t = e.binary(m, T::Div, dy, b)?;
            if want(0) {
                out.push((0, e.unbroadcast_like(m, t, a)?));
            }
            if want(1) {
                let g = e.binary(m, T::Mul, t, y)?;
                let g = e.unbroadcast_like(m, g, b)?;
                out.push((1, e.unary(m, T::Neg, g)?));
            }
        }
        T::Max | T::Min => {
            // The operand the result came from takes dy; on a tie each takes half, as the
            // reference kernels' max_grad/min_grad. With `w_a = [a wins]` and `w_b = [b wins]`
            // (ge masks, both 1 on a tie): da = dy · (w_a - w_a·w_b/2), likewise db.
            let (a, b) = (x(0)?, x(1)?);
            let (wa, wb) = if kind == T::Max {
                (e.binary(m, T::Ge, a, b)?, e.binary(m, T::Ge, b, a)?)
            } else {
                (e.binary(m, T::Ge, b, a)?, e.binary(m, T::Ge, a, b)?)
            };
            let both = e.binary(m, T::Mul, wa, wb)?;
            let half = e.scale(m, both, 0.5)?;
            for (i, w, v) in [(0, wa, a), (1, wb, b)] {
                if want(i) {
                    let share = e.binary(m, T::Sub, w, half)?;
                    let g = e.binary(m, T::Mul, dy, share)?;
                    out.push((i, e.unbroadcast_like(m, g, v)?));
                }
            }
        }
        T::Pow => {
            // y = a^b: da = dy · b · a^(b-1), db = dy · y · ln a.
            let (a, b) = (x(0)?, x(1)?);
            if want(0) {
                let one = e.constant(m, 1.0, scalar_like(m, y))?;
                let b1 = e.binary(m, T::Sub, b, one)?;
                let p = e.binary(m, T::Pow, a, b1)?;
                let g = e.binary(m, T::Mul, dy, p)?;
                let g = e.binary(m, T::Mul, g, b)?;
                out.push((0, e.unbroadcast_like(m, g, a)?));
            }
            if want(1) {
                let l = e.unary(m, T::Log, a)?;
                let g = e.binary(m, T::Mul, dy, y)?;
                let g = e.binary(m, T::Mul, g, l)?;
                out.push((1, e.unbroadcast_like(m, g, b)?));
            }
        }
        T::Select => {
            // The mask chooses; it has no gradient of its own (zero).
            let (mask, a, b) = (x(0)?, x(1)?, x(2)?);
            if want(0) {
                let ty = m.value_type(mask).clone();
                out.push((0, e.constant(m, 0.0, ty)?));
            }
            let zero = e.constant(m, 0.0, scalar_like(m, y))?;
            if want(1) {
                let g = e.op(m, T::Select, &[mask, dy, zero], vec![])?;
                out.push((1, e.unbroadcast_like(m, g, a)?));
            }
            if want(2) {
                let g = e.op(m, T::Select, &[mask, zero, dy], vec![])?;
                out.push((2, e.unbroadcast_like(m, g, b)?));
            }
        }
        T::Cast => {
            let back = match m.value_type(x(0)?) {
                fbc_ir::Type::Tensor(t) => t.elem.name(),
                _ => "f32",
            };
            let attrs = vec![("dtype".to_string(), Attr::Str(back.to_string()))];
            out.push((0, e.op(m, T::Cast, &[dy], attrs)?));
        }
        T::Erf => {
            // dx = dy · 2/√π · e^(−x²).
            let x0 = x(0)?;
            let sq = e.binary(m, T::Mul, x0, x0)?;
            let n = e.unary(m, T::Neg, sq)?;
            let ex = e.unary(m, T::Exp, n)?;
            let g = e.binary(m, T::Mul, dy, ex)?;
            out.push((0, e.scale(m, g, std::f64::consts::FRAC_2_SQRT_PI)?));
        }
        T::Neg => out.push((0, e.unary(m, T::Neg, dy)?)),
        T::Exp => out.push((0, e.binary(m, T::Mul, dy, y)?)),
        T::Log => out.push((0, e.binary(m, T::Div, dy, x(0)?)?)),
        T::Sqrt => {
            // dx = dy / (2·y).
            let g = e.binary(m, T::Div, dy, y)?;
            out.push((0, e.scale(m, g, 0.5)?));
        }
        T::Rsqrt => {
            // y = x^(-1/2): dx = -dy · y³ / 2.
            let y2 = e.binary(m, T::Mul, y, y)?;
            let y3 = e.binary(m, T::Mul, y2, y)?;
            let g = e.binary(m, T::Mul, dy, y3)?;
            out.push((0, e.scale(m, g, -0.5)?));
        }
        T::Tanh => out.push((0, e.op(m, T::TanhGrad, &[y, dy], vec![])?)),
        T::Sigmoid => out.push((0, e.op(m, T::SigmoidGrad, &[y, dy], vec![])?)),
        T::Relu => out.push((0, e.op(m, T::ReluGrad, &[x(0)?, dy], vec![])?)),
        T::Silu => out.push((0, e.op(m, T::SiluGrad, &[x(0)?, dy], vec![])?)),
        T::Gelu => {
            let attrs = copy_attrs(&d, &["approximate"]);
            out.push((0, e.op(m, T::GeluGrad, &[x(0)?, dy], attrs)?));
        }
        T::Scale => {
            let attrs = copy_attrs(&d, &["factor"]);
            out.push((0, e.op(m, T::Scale, &[dy], attrs)?));
        }
        T::Matmul => matmul(e, m, &d, dy, want(0), want(1), &mut out)?,
        T::ReduceSum | T::ReduceMean | T::ReduceMax => {
            out.push((0, reduce(e, m, &d, dy)?));
        }
        T::Softmax => {
            let attrs = copy_attrs(&d, &["axis"]);
            out.push((0, e.op(m, T::SoftmaxGrad, &[y, dy], attrs)?));
        }
        T::Layernorm => {
            let attrs = copy_attrs(&d, &["axis", "eps"]);
            let r = e.ops(m, T::LayernormGrad, &[x(0)?, x(1)?, dy], attrs)?;
            out.extend(r.into_iter().enumerate().filter(|&(i, _)| want(i)));
        }
        T::Rmsnorm => {
            let attrs = copy_attrs(&d, &["eps"]);
            let r = e.ops(m, T::RmsnormGrad, &[x(0)?, x(1)?, dy], attrs)?;
            out.extend(r.into_iter().enumerate().filter(|&(i, _)| want(i)));
        }
        T::Rope => rope(e, m, &d, dy, active, &mut out)?,
        T::Conv2d => conv2d(e, m, &d, dy, active, &mut out)?,
        T::GroupNorm => {
            let attrs = copy_attrs(&d, &["groups", "eps"]);
            let r = e.ops(m, T::GroupNormGrad, &[x(0)?, x(1)?, dy], attrs)?;
            out.extend(r.into_iter().enumerate().filter(|&(i, _)| want(i)));
        }
        T::Upsample => {
            // Each input pixel fed a scale × scale block: sum dy over the block, seen as axes 3
            // and 5 of [N, C, H, scale, W, scale].
            let xt = e.tensor(m, x(0)?)?;
            let s = d.attr("scale").and_then(Attr::as_int).unwrap_or(2).unsigned_abs();
            let [n, c, h, w] = xt.shape[..] else {
                return Err(internal(d.span, "upsample of a tensor of rank other than 4"));
            };
            let blocks = e.reshape(m, dy, &[n, c, h, s, w, s])?;
            let attrs = vec![("axes".into(), Attr::ints([3, 5]))];
            out.push((0, e.op(m, T::ReduceSum, &[blocks], attrs)?));
        }
        T::Reshape => {
            let xt = e.tensor(m, x(0)?)?;
            out.push((0, e.reshape(m, dy, &xt.shape)?));
        }
        T::Transpose => {
            let perm = d.attr("perm").and_then(Attr::as_ints).unwrap_or_default();
            let mut inv = vec![0i64; perm.len()];
            for (k, &p) in perm.iter().enumerate() {
                let slot = usize::try_from(p)
                    .ok()
                    .and_then(|p| inv.get_mut(p))
                    .ok_or_else(|| internal(d.span, "`perm` is not a permutation"))?;
                *slot = i64::try_from(k).unwrap_or(i64::MAX);
            }
            let g = e.op(m, T::Transpose, &[dy], vec![("perm".into(), Attr::ints(inv))])?;
            out.push((0, g));
        }
        T::Broadcast => out.push((0, e.unbroadcast_like(m, dy, x(0)?)?)),
        T::Slice => {
            let xt = e.tensor(m, x(0)?)?;
            let mut attrs = copy_attrs(&d, &["start"]);
            attrs.push(("shape".into(), dims_attr(&xt.shape)));
            out.push((0, e.op(m, T::SliceGrad, &[dy], attrs)?));
        }
        T::Concat => {
            // Each operand's gradient is its slice of dy along the concatenation axis.
            let dyt = e.tensor(m, dy)?;
            let axis = d.attr("axis").and_then(Attr::as_int).unwrap_or(0);
            let k = normalize_axis(e, axis, dyt.rank())?;
            let mut offset = 0u64;
            for (i, &v) in d.operands.iter().enumerate() {
                let size = e.tensor(m, v)?.shape.get(k).copied().unwrap_or(0);
                if want(i) {
                    let mut start = vec![0u64; dyt.rank()];
                    let mut end = dyt.shape.to_vec();
                    start[k] = offset;
                    end[k] = offset + size;
                    let attrs =
                        vec![("start".into(), dims_attr(&start)), ("end".into(), dims_attr(&end))];
                    out.push((i, e.op(m, T::Slice, &[dy], attrs)?));
                }
                offset += size;
            }
        }
        T::Embedding => {
            // Only the table has a gradient; the i32 ids never do.
            if want(0) {
                let vocab = e.tensor(m, x(0)?)?.shape.first().copied().unwrap_or(0);
                let attrs = vec![("vocab".into(), Attr::Int(u64_to_i64(vocab)))];
                out.push((0, e.op(m, T::EmbeddingGrad, &[x(1)?, dy], attrs)?));
            }
        }
        T::CrossEntropy => {
            if want(0) {
                let g = e.op(m, T::CrossEntropyGrad, &[x(0)?, x(1)?, dy], vec![])?;
                out.push((0, g));
            }
        }
        T::Unbroadcast => {
            let xt = e.tensor(m, x(0)?)?;
            out.push((0, e.broadcast(m, dy, &xt.shape)?));
        }
        T::SliceGrad => {
            // The forward pads x into zeros at `start`; its adjoint reads that box back out.
            let xt = e.tensor(m, x(0)?)?;
            let start = d.attr("start").and_then(Attr::as_ints).unwrap_or_default();
            let end: Vec<i64> = start
                .iter()
                .zip(&xt.shape)
                .map(|(&s, &n)| s.saturating_add(u64_to_i64(n)))
                .collect();
            let attrs = vec![("start".into(), Attr::ints(start)), ("end".into(), Attr::ints(end))];
            out.push((0, e.op(m, T::Slice, &[dy], attrs)?));
        }
        // A step function: its derivative is zero wherever it exists, so nothing flows back.
        T::Ge => {}
        no_rule!() => return Err(no_rule()),
    }
    Ok(out)
}

/// The attributes a convolution's backward ops copy from the forward op.
const CONV_ATTRS: [&str; 4] = ["stride", "padding", "dilation", "groups"];

/// `y = conv2d(x, w, bias)`: `dx` by `conv2d_grad_input` (the transposed convolution), `dw` by
/// `conv2d_grad_weight`, each told its forward operand's shape; `dbias` sums `dy` over every
/// axis but the output channel.
fn conv2d(
    e: &mut Emitter<'_>,
    m: &mut Module,
    d: &OpData,
    dy: Value,
    active: &[bool],
    out: &mut Vec<(usize, Value)>,
) -> Result<(), Diagnostic> {
    let (x, w) = (d.operands[0], d.operands[1]);
    let want = |i: usize| active.get(i).copied().unwrap_or(false);
    let with_shape = |e: &Emitter<'_>, m: &Module, v: Value| -> Result<_, Diagnostic> {
        let mut attrs = copy_attrs(d, &CONV_ATTRS);
        attrs.push(("shape".into(), dims_attr(&e.tensor(m, v)?.shape)));
        Ok(attrs)
    };
    if want(0) {
        let attrs = with_shape(e, m, x)?;
        out.push((0, e.op(m, T::Conv2dGradInput, &[dy, w], attrs)?));
    }
    if want(1) {
        let attrs = with_shape(e, m, w)?;
        out.push((1, e.op(m, T::Conv2dGradWeight, &[x, dy], attrs)?));
    }
    if want(2) {
        let attrs = vec![("axes".into(), Attr::ints([0, 2, 3]))];
        out.push((2, e.op(m, T::ReduceSum, &[dy], attrs)?));
    }
    Ok(())
}

/// `C = op(a)·op(b)` with `op` the optional transposition: `dA = dC·Bᵀ`, `dB = Aᵀ·dC`, written
/// back in each operand's stored orientation and summed over the batch dimensions it was
/// broadcast along (the same formulas as the reference kernel `matmul_grad`).
fn matmul(
    e: &mut Emitter<'_>,
    m: &mut Module,
    d: &OpData,
    dy: Value,
    want_a: bool,
    want_b: bool,
    out: &mut Vec<(usize, Value)>,
) -> Result<(), Diagnostic> {
    let (a, b) = match d.operands.as_slice() {
        [a, b] => (*a, *b),
        _ => return Err(internal(d.span, "matmul without two operands")),
    };
    let (ta, tb) = (bool_attr(d, "transpose_a"), bool_attr(d, "transpose_b"));
    let flags = |t_a: bool, t_b: bool| {
        let mut attrs = Vec::new();
        if t_a {
            attrs.push(("transpose_a".to_string(), Attr::Bool(true)));
        }
        if t_b {
            attrs.push(("transpose_b".to_string(), Attr::Bool(true)));
        }
        attrs
    };
    if want_a {
        let g = if ta {
            // a holds Aᵀ: da = (dC·Bᵀ)ᵀ = B·dCᵀ.
            e.op(m, T::Matmul, &[b, dy], flags(tb, true))?
        } else {
            e.op(m, T::Matmul, &[dy, b], flags(false, !tb))?
        };
        out.push((0, e.unbroadcast_like(m, g, a)?));
    }
    if want_b {
        let (at, bt) = (e.tensor(m, a)?, e.tensor(m, b)?);
        let g = if bt.rank() == 2 && at.rank() > 2 && !ta {
            // The usual `x[B, S, K] · W[K, N]`: summing Aᵀ·dC over the batch is one matmul of
            // the flattened rows, `[B·S, K]ᵀ · [B·S, N]`, which avoids a [B, K, N] temporary and
            // its unbroadcast (the paper's ∂L/∂W = Xᵀ·∂L/∂Y).
            let r = at.rank();
            let rows = at.shape[..r - 1]
                .iter()
                .try_fold(1u64, |acc, &n| acc.checked_mul(n))
                .ok_or_else(|| internal(d.span, "row count overflows u64"))?;
            let dyt = e.tensor(m, dy)?;
            let a2 = e.reshape(m, a, &[rows, at.shape[r - 1]])?;
            let dy2 = e.reshape(m, dy, &[rows, dyt.shape[dyt.rank() - 1]])?;
            if tb {
                e.op(m, T::Matmul, &[dy2, a2], flags(true, false))?
            } else {
                e.op(m, T::Matmul, &[a2, dy2], flags(true, false))?
            }
        } else if tb {
            // b holds Bᵀ: db = (Aᵀ·dC)ᵀ = dCᵀ·A.
            e.op(m, T::Matmul, &[dy, a], flags(true, ta))?
        } else {
            e.op(m, T::Matmul, &[a, dy], flags(!ta, false))?
        };
        out.push((1, e.unbroadcast_like(m, g, b)?));
    }
    Ok(())
}

/// Gradients of `reduce_sum`, `reduce_mean` and `reduce_max` over `axes`.
///
/// `dy` is first given the keep-dim shape (reduced axes of size 1) so it broadcasts against `x`.
/// For `reduce_max` the gradient goes to the elements equal to their group's maximum
/// (`ge(x, max)`), split evenly among ties: `dx = ge(x, max) · dy / count_of_ties`, which is
/// the reference kernel `reduce_max_grad`'s convention. (Where a group's maximum is NaN the mask
/// is all zero and the group's gradient is NaN; the reference kernel sends it to the NaNs.)
fn reduce(e: &mut Emitter<'_>, m: &mut Module, d: &OpData, dy: Value) -> Result<Value, Diagnostic> {
    let x = *d.operands.first().ok_or_else(|| internal(d.span, "missing operand"))?;
    let y = *d.results.first().ok_or_else(|| internal(d.span, "missing result"))?;
    let xt: TensorType = e.tensor(m, x)?;
    let raw = d.attr("axes").and_then(Attr::as_ints).unwrap_or_default();
    let mut axes = Vec::with_capacity(raw.len());
    for &a in &raw {
        axes.push(normalize_axis(e, a, xt.rank())?);
    }
    let keep: Vec<u64> =
        xt.shape.iter().enumerate().map(|(k, &n)| if axes.contains(&k) { 1 } else { n }).collect();
    let count = axes.iter().try_fold(1u64, |acc, &k| acc.checked_mul(xt.shape[k])).unwrap_or(0);
    match T::of(d.def) {
        Some(T::ReduceSum) => {
            let dyk = e.reshape(m, dy, &keep)?;
            e.broadcast(m, dyk, &xt.shape)
        }
        Some(T::ReduceMean) => {
            // Scale the small tensor; a mean over no elements has no elements to receive it.
            let g = if count == 0 { dy } else { e.scale(m, dy, 1.0 / count as f64)? };
            let gk = e.reshape(m, g, &keep)?;
            e.broadcast(m, gk, &xt.shape)
        }
        // reduce_max.
        _ => {
            let yk = e.reshape(m, y, &keep)?;
            let mask = e.binary(m, T::Ge, x, yk)?;
            let axes_attr = Attr::ints(axes.iter().map(|&k| i64::try_from(k).unwrap_or(i64::MAX)));
            let attrs = vec![("axes".into(), axes_attr), ("keepdim".into(), Attr::Bool(true))];
            let ties = e.op(m, T::ReduceSum, &[mask], attrs)?;
            let dyk = e.reshape(m, dy, &keep)?;
            let share = e.binary(m, T::Div, dyk, ties)?;
            e.binary(m, T::Mul, mask, share)
        }
    }
}

/// `y = x·cos + rotate_half(x)·sin`: `dx = rope_grad(dy, cos, sin)`; the tables, when they
/// depend on a differentiated argument, get `Σ_batch dy·x` and `Σ_batch dy·rotate_half(x)`.
fn rope(
    e: &mut Emitter<'_>,
    m: &mut Module,
    d: &OpData,
    dy: Value,
    active: &[bool],
    out: &mut Vec<(usize, Value)>,
) -> Result<(), Diagnostic> {
    let (x, cos, sin) = match d.operands.as_slice() {
        [x, c, s] => (*x, *c, *s),
        _ => return Err(internal(d.span, "rope without three operands")),
    };
    let want = |i: usize| active.get(i).copied().unwrap_or(false);
    if want(0) {
        out.push((0, e.op(m, T::RopeGrad, &[dy, cos, sin], vec![])?));
    }
    if want(1) {
        let g = e.binary(m, T::Mul, dy, x)?;
        out.push((1, e.unbroadcast_like(m, g, cos)?));
    }
    if want(2) {
        // rotate_half(x) = concat(-x[..., h:], x[..., :h]) along the last axis.
        let xt = e.tensor(m, x)?;
        let r = xt.rank();
        let dim = xt.shape[r - 1];
        let h = dim / 2;
        let zeros = vec![0u64; r];
        let mut mid = zeros.clone();
        mid[r - 1] = h;
        let mut end_lo = xt.shape.to_vec();
        end_lo[r - 1] = h;
        let slice = |start: &[u64], end: &[u64]| {
            vec![("start".to_string(), dims_attr(start)), ("end".to_string(), dims_attr(end))]
        };
        let hi = e.op(m, T::Slice, &[x], slice(&mid, &xt.shape))?;
        let lo = e.op(m, T::Slice, &[x], slice(&zeros, &end_lo))?;
        let neg_hi = e.unary(m, T::Neg, hi)?;
        let axis = vec![("axis".to_string(), Attr::Int(-1))];
        let rot = e.op(m, T::Concat, &[neg_hi, lo], axis)?;
        let g = e.binary(m, T::Mul, dy, rot)?;
        out.push((2, e.unbroadcast_like(m, g, sin)?));
    }
    Ok(())
}
