//! Backward helpers: the dedicated, numerically sensible vector-Jacobian products that autodiff
//! emits instead of differentiating a forward op's decomposition.
//!
//! Each `*_grad` takes the upstream gradient `dy` (the gradient of a scalar loss with respect to
//! the op's result) and returns the gradient with respect to the op's inputs. Where an input was
//! broadcast, its gradient is summed back to its own shape with [`reduce_to_shape`]. Gradients of
//! ops whose upstream gradient has the result's shape demand exactly that shape: backward helpers
//! never broadcast `dy`.
//!
//! Non-differentiable points are resolved as follows: `relu'(0) = 0`; where `max`/`min`
//! operands tie, each receives half of `dy`; where several elements tie for a `reduce_max`, `dy`
//! is split evenly among them. A NaN operand of `max`/`min` takes the whole gradient (it is
//! what the result is).

use std::cmp::Ordering;

use super::elementwise::{sigmoid1, GeluApproximation, GELU_CUBIC, SQRT_2_OVER_PI};
use super::error::{KernelError, Result};
use super::layout::{axes_mask, normalize_axis};
use super::matmul::matmul;
use super::nn::{
    check_cross_entropy, check_ids, check_param, check_rope, for_each_row, logsumexp, rms_rstd,
    row_moments,
};
use super::reduce::{reduce_to_shape, reduced_shape};
use super::scalar::Real;
use super::shape::{inverse_permutation, slice, transpose};
use super::tensor::{broadcast_shapes_named, broadcast_to_named, same_shape, zip_with, Tensor};

/// The gradient of [`softmax`](super::nn::softmax) along `axis`, from its output `y`:
/// `dx = y · (dy - Σ_axis(dy · y))`. `y` and `dy` must have the same shape.
pub fn softmax_grad<T: Real>(y: &Tensor<T>, dy: &Tensor<T>, axis: i64) -> Result<Tensor<T>> {
    const OP: &str = "softmax_grad";
    same_shape(OP, y, dy)?;
    let axis = normalize_axis(OP, axis, y.rank())?;
    let mut dx = dy.clone();
    let out = dx.data_mut();
    let (yd, gd) = (y.data(), dy.data());
    for_each_row(y.shape(), axis, |row| {
        let s = row.iter().fold(T::zero(), |s, &o| s + gd[o] * yd[o]);
        for &o in row {
            out[o] = yd[o] * (gd[o] - s);
        }
    });
    Ok(dx)
}

/// The gradient of [`layernorm`](super::nn::layernorm) with respect to `(x, gamma, beta)`.
///
/// Per row, with `x̂ = (x - mean)·r`, `r = 1/sqrt(var + eps)` and `g = dy·gamma`:
/// `dx = r·(g - mean(g) - x̂·mean(g·x̂))`, `dgamma = Σ_rows dy·x̂`, `dbeta = Σ_rows dy`. `dy` has
/// `x`'s shape, `gamma` has shape `[x.shape[axis]]`; `dgamma` and `dbeta` have gamma's shape.
pub fn layernorm_grad<T: Real>(
    x: &Tensor<T>,
    gamma: &Tensor<T>,
    dy: &Tensor<T>,
    axis: i64,
    eps: f64,
) -> Result<(Tensor<T>, Tensor<T>, Tensor<T>)> {
    const OP: &str = "layernorm_grad";
    same_shape(OP, x, dy)?;
    let axis = normalize_axis(OP, axis, x.rank())?;
    let len = x.shape()[axis];
    check_param(OP, "gamma", gamma, len)?;
    let eps = T::lit(eps);
    let n = T::lit(len as f64);
    let (xd, gd, gm) = (x.data(), dy.data(), gamma.data());
    let mut dx = x.clone();
    let mut dgamma = vec![T::zero(); len];
    let mut dbeta = vec![T::zero(); len];
    let out = dx.data_mut();
    let mut xhat = vec![T::zero(); len];
    for_each_row(x.shape(), axis, |row| {
        let (mean, var) = row_moments(xd, row);
        let r = (var + eps).sqrt().recip();
        let (mut sum_g, mut sum_gx) = (T::zero(), T::zero());
        for (i, &o) in row.iter().enumerate() {
            xhat[i] = (xd[o] - mean) * r;
            let g = gd[o] * gm[i];
            sum_g = sum_g + g;
            sum_gx = sum_gx + g * xhat[i];
            dgamma[i] = dgamma[i] + gd[o] * xhat[i];
            dbeta[i] = dbeta[i] + gd[o];
        }
        let (mean_g, mean_gx) = (sum_g / n, sum_gx / n);
        for (i, &o) in row.iter().enumerate() {
            out[o] = r * (gd[o] * gm[i] - mean_g - xhat[i] * mean_gx);
        }
    });
    Ok((dx, Tensor::from_vec(dgamma), Tensor::from_vec(dbeta)))
}

/// The gradient of [`rmsnorm`](super::nn::rmsnorm) with respect to `(x, gamma)`.
///
/// Per row, with `r = 1/sqrt(mean(x²) + eps)` and `g = dy·gamma`:
/// `dx = r·g - x·r³·mean(g·x)` and `dgamma = Σ_rows dy·x·r`.
pub fn rmsnorm_grad<T: Real>(
    x: &Tensor<T>,
    gamma: &Tensor<T>,
    dy: &Tensor<T>,
    eps: f64,
) -> Result<(Tensor<T>, Tensor<T>)> {
    const OP: &str = "rmsnorm_grad";
    same_shape(OP, x, dy)?;
    let axis = normalize_axis(OP, -1, x.rank())?;
    let len = x.shape()[axis];
    check_param(OP, "gamma", gamma, len)?;
    let eps = T::lit(eps);
    let n = T::lit(len as f64);
    let (xd, gd, gm) = (x.data(), dy.data(), gamma.data());
    let mut dx = x.clone();
    let mut dgamma = vec![T::zero(); len];
    let out = dx.data_mut();
    for_each_row(x.shape(), axis, |row| {
        let r = rms_rstd(xd, row, eps);
        let s = row.iter().enumerate().fold(T::zero(), |s, (i, &o)| s + gd[o] * gm[i] * xd[o]) / n;
        for (i, &o) in row.iter().enumerate() {
            out[o] = r * gd[o] * gm[i] - xd[o] * r * r * r * s;
            dgamma[i] = dgamma[i] + gd[o] * xd[o] * r;
        }
    });
    Ok((dx, Tensor::from_vec(dgamma)))
}

/// Applies `f(input, dy)` elementwise to same-shaped operands.
fn unary_grad<T: Real>(
    op: &'static str,
    input: &Tensor<T>,
    dy: &Tensor<T>,
    f: impl FnMut(T, T) -> T,
) -> Result<Tensor<T>> {
    same_shape(op, input, dy)?;
    zip_with(op, input, dy, f)
}

/// The gradient of [`gelu`](super::elementwise::gelu) from its input `x`.
///
/// Exact form: `dy·(Φ(x) + x·φ(x))` with `Φ(x) = (1 + erf(x/√2))/2` and `φ(x) =
/// e^(-x²/2)/√(2π)`. Tanh form, with `u = √(2/π)(x + 0.044715x³)` and `t = tanh(u)`:
/// `dy·(0.5(1 + t) + 0.5x(1 - t²)·√(2/π)(1 + 3·0.044715x²))`.
pub fn gelu_grad<T: Real>(
    x: &Tensor<T>,
    dy: &Tensor<T>,
    approximate: GeluApproximation,
) -> Result<Tensor<T>> {
    let half = T::lit(0.5);
    match approximate {
        GeluApproximation::None => {
            // 1/√(2π)
            let inv_sqrt_2pi = T::lit(0.398_942_280_401_432_7);
            unary_grad("gelu_grad", x, dy, |v, g| {
                let cdf = half * (T::one() + (v * T::FRAC_1_SQRT_2()).erf());
                let pdf = inv_sqrt_2pi * (-half * v * v).exp();
                g * (cdf + v * pdf)
            })
        }
        GeluApproximation::Tanh => {
            let (k, c) = (T::lit(SQRT_2_OVER_PI), T::lit(GELU_CUBIC));
            let three = T::lit(3.0);
            unary_grad("gelu_grad", x, dy, |v, g| {
                let t = (k * (v + c * v * v * v)).tanh();
                let du = k * (T::one() + three * c * v * v);
                g * (half * (T::one() + t) + half * v * (T::one() - t * t) * du)
            })
        }
    }
}

/// The gradient of [`silu`](super::elementwise::silu) from its input `x`:
/// `dy·s·(1 + x·(1 - s))` with `s = sigmoid(x)`.
pub fn silu_grad<T: Real>(x: &Tensor<T>, dy: &Tensor<T>) -> Result<Tensor<T>> {
    unary_grad("silu_grad", x, dy, |v, g| {
        let s = sigmoid1(v);
        g * s * (T::one() + v * (T::one() - s))
    })
}

/// The gradient of [`sigmoid`](super::elementwise::sigmoid) from its output `y`: `dy·y·(1 - y)`.
pub fn sigmoid_grad<T: Real>(y: &Tensor<T>, dy: &Tensor<T>) -> Result<Tensor<T>> {
    unary_grad("sigmoid_grad", y, dy, |s, g| g * s * (T::one() - s))
}

/// The gradient of [`tanh`](super::elementwise::tanh) from its output `y`: `dy·(1 - y²)`.
pub fn tanh_grad<T: Real>(y: &Tensor<T>, dy: &Tensor<T>) -> Result<Tensor<T>> {
    unary_grad("tanh_grad", y, dy, |t, g| g * (T::one() - t * t))
}

/// The gradient of [`relu`](super::elementwise::relu) from its input `x`: `dy` where `x > 0`,
/// else 0 (so `relu'(0) = 0`).
pub fn relu_grad<T: Real>(x: &Tensor<T>, dy: &Tensor<T>) -> Result<Tensor<T>> {
    unary_grad("relu_grad", x, dy, |v, g| if v > T::zero() { g } else { T::zero() })
}

/// The adjoint of [`rope`](super::nn::rope) with respect to `x`. `rotate_half` is a signed
/// permutation `R` with `Rᵀ = -R`, so `dx = dy·cos + Rᵀ(dy·sin) = dy·cos - rotate_half(dy·sin)`:
/// `dx[j] = dy[j]·cos[j] + dy[j+D/2]·sin[j+D/2]` for `j < D/2` and `dy[j]·cos[j] -
/// dy[j-D/2]·sin[j-D/2]` otherwise. Shapes as for `rope`.
pub fn rope_grad<T: Real>(dy: &Tensor<T>, cos: &Tensor<T>, sin: &Tensor<T>) -> Result<Tensor<T>> {
    let (s, d) = check_rope("rope_grad", dy, cos, sin)?;
    let mut dx = dy.clone();
    if d == 0 {
        return Ok(dx);
    }
    let h = d / 2;
    let rows = dy.data().chunks_exact(d).zip(dx.data_mut().chunks_exact_mut(d));
    for (r, (g, out)) in rows.enumerate() {
        let pos = (r % s) * d;
        let (c, sn) = (&cos.data()[pos..pos + d], &sin.data()[pos..pos + d]);
        for j in 0..d {
            let rotated = if j < h { g[j + h] * sn[j + h] } else { -(g[j - h] * sn[j - h]) };
            out[j] = g[j] * c[j] + rotated;
        }
    }
    Ok(dx)
}

/// The gradient of [`cross_entropy`](super::nn::cross_entropy) with respect to `logits`, scaled
/// by the rank-0 upstream gradient `dloss`: `dlogits[n, c] = dloss/N · (softmax(logits[n])[c] -
/// [c == labels[n]])`. Errors as `cross_entropy` does, and when `dloss` is not rank 0.
pub fn cross_entropy_grad<T: Real>(
    logits: &Tensor<T>,
    labels: &Tensor<i32>,
    dloss: &Tensor<T>,
) -> Result<Tensor<T>> {
    const OP: &str = "cross_entropy_grad";
    let (n, c) = check_cross_entropy(OP, logits, labels)?;
    if dloss.rank() != 0 {
        return Err(KernelError::shape(
            OP,
            format!("dloss must be rank 0, got shape {:?}", dloss.shape()),
        ));
    }
    let scale = dloss.data()[0] / T::lit(n as f64);
    let mut dx = logits.clone();
    if c > 0 {
        for (row, &label) in dx.data_mut().chunks_exact_mut(c).zip(labels.data()) {
            let lse = logsumexp(row.iter().copied());
            for v in row.iter_mut() {
                *v = (*v - lse).exp() * scale;
            }
            row[label as usize] = row[label as usize] - scale;
        }
    }
    Ok(dx)
}

/// The gradient of [`embedding`](super::nn::embedding) with respect to the table: a zero
/// `[vocab, D]` tensor into which each row `dy[i..., :]` is added at row `ids[i...]`
/// (scatter-add; repeated ids accumulate, in row-major order of `ids`). `dy` must have shape
/// `ids.shape ++ [D]`; ids must lie in `0..vocab`.
pub fn embedding_grad<T: Real>(
    ids: &Tensor<i32>,
    dy: &Tensor<T>,
    vocab: usize,
) -> Result<Tensor<T>> {
    const OP: &str = "embedding_grad";
    let fits = dy.rank() == ids.rank() + 1 && dy.shape()[..ids.rank()] == *ids.shape();
    if !fits {
        return Err(KernelError::shape(
            OP,
            format!("dy must have shape {:?} ++ [D], got {:?}", ids.shape(), dy.shape()),
        ));
    }
    check_ids(OP, "id", ids, vocab)?;
    let d = dy.shape()[ids.rank()];
    let mut table = Tensor::zeros(&[vocab, d])?;
    if d > 0 {
        let out = table.data_mut();
        for (&id, row) in ids.data().iter().zip(dy.data().chunks_exact(d)) {
            let dst = &mut out[id as usize * d..(id as usize + 1) * d];
            for (t, &g) in dst.iter_mut().zip(row) {
                *t = *t + g;
            }
        }
    }
    Ok(table)
}

/// Routes `dy` of a broadcasting binary selection op to its operands, still in the broadcast
/// shape: `pick(a, b)` says which operand the result came from.
fn select_grad<T: Real>(
    op: &'static str,
    a: &Tensor<T>,
    b: &Tensor<T>,
    dy: &Tensor<T>,
    pick: impl Fn(T, T) -> Ordering,
) -> Result<(Tensor<T>, Tensor<T>)> {
    let shape = broadcast_shapes_named(op, a.shape(), b.shape())?;
    if dy.shape() != shape {
        return Err(KernelError::shape(
            op,
            format!("dy must have the broadcast shape {shape:?}, got {:?}", dy.shape()),
        ));
    }
    let (a, b) = (broadcast_to_named(op, a, &shape)?, broadcast_to_named(op, b, &shape)?);
    let half = T::lit(0.5);
    let mut da = dy.clone();
    let mut db = dy.clone();
    for (((ga, gb), &x), &y) in
        da.data_mut().iter_mut().zip(db.data_mut().iter_mut()).zip(a.data()).zip(b.data())
    {
        match pick(x, y) {
            Ordering::Greater => *gb = T::zero(),
            Ordering::Less => *ga = T::zero(),
            Ordering::Equal => {
                *ga = *ga * half;
                *gb = *gb * half;
            }
        }
    }
    Ok((da, db))
}

/// Which operand `max` takes: the larger, a NaN, or both (tie or two NaNs).
fn max_pick<T: Real>(x: T, y: T) -> Ordering {
    match (x.is_nan(), y.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
    }
}

/// The gradient of [`max`](super::elementwise::max) with respect to `(a, b)`: `dy` goes to the
/// larger operand, half to each on a tie, all to a NaN operand; each part is then summed back
/// to its operand's shape. `dy` has the broadcast shape.
pub fn max_grad<T: Real>(
    a: &Tensor<T>,
    b: &Tensor<T>,
    dy: &Tensor<T>,
) -> Result<(Tensor<T>, Tensor<T>)> {
    let (da, db) = select_grad("max_grad", a, b, dy, max_pick)?;
    Ok((reduce_to_shape(&da, a.shape())?, reduce_to_shape(&db, b.shape())?))
}

/// The gradient of [`min`](super::elementwise::min) with respect to `(a, b)`: as [`max_grad`]
/// with the smaller operand taking `dy`.
pub fn min_grad<T: Real>(
    a: &Tensor<T>,
    b: &Tensor<T>,
    dy: &Tensor<T>,
) -> Result<(Tensor<T>, Tensor<T>)> {
    let (da, db) = select_grad("min_grad", a, b, dy, |x, y| max_pick(y, x))?;
    Ok((reduce_to_shape(&da, a.shape())?, reduce_to_shape(&db, b.shape())?))
}

/// The gradient of [`matmul`] with respect to `(a, b)`, for the same transpose flags, each
/// summed over the batch dimensions its operand was broadcast along.
///
/// With `A = op(a)`, `B = op(b)` and `C = A·B`: `dA = dC·Bᵀ` and `dB = Aᵀ·dC`, so
/// `da = matmul(dy, b, false, !tb)` or, when `a` is stored transposed, `matmul(b, dy, tb, true)`;
/// `db = matmul(a, dy, !ta, false)` or, when `b` is stored transposed, `matmul(dy, a, true, ta)`.
pub fn matmul_grad<T: Real>(
    a: &Tensor<T>,
    b: &Tensor<T>,
    dy: &Tensor<T>,
    transpose_a: bool,
    transpose_b: bool,
) -> Result<(Tensor<T>, Tensor<T>)> {
    let expected = matmul(a, b, transpose_a, transpose_b)?.shape().to_vec();
    if dy.shape() != expected {
        return Err(KernelError::shape(
            "matmul_grad",
            format!("dy must have the product's shape {expected:?}, got {:?}", dy.shape()),
        ));
    }
    let da = if transpose_a {
        matmul(b, dy, transpose_b, true)?
    } else {
        matmul(dy, b, false, !transpose_b)?
    };
    let db = if transpose_b {
        matmul(dy, a, true, transpose_a)?
    } else {
        matmul(a, dy, !transpose_a, false)?
    };
    Ok((reduce_to_shape(&da, a.shape())?, reduce_to_shape(&db, b.shape())?))
}

/// `dy` of a reduction over `axes` of an input of shape `input_shape`, reshaped to the
/// keep-dim shape and checked against what the reduction produces.
fn expand_reduced<T: Real>(
    op: &'static str,
    dy: &Tensor<T>,
    input_shape: &[usize],
    axes: &[i64],
    keepdim: bool,
) -> Result<(Tensor<T>, usize)> {
    let mask = axes_mask(op, axes, input_shape.len())?;
    let expected = reduced_shape(input_shape, &mask, keepdim);
    if dy.shape() != expected {
        return Err(KernelError::shape(
            op,
            format!("dy must have the reduction's shape {expected:?}, got {:?}", dy.shape()),
        ));
    }
    let count = input_shape.iter().zip(&mask).filter(|(_, &m)| m).map(|(d, _)| d).product();
    let kept = dy.clone().reshaped(reduced_shape(input_shape, &mask, true));
    Ok((broadcast_to_named(op, &kept, input_shape)?, count))
}

/// The gradient of [`reduce_sum`](super::reduce::reduce_sum): `dy` broadcast back over the
/// reduced axes to `input_shape`.
pub fn reduce_sum_grad<T: Real>(
    dy: &Tensor<T>,
    input_shape: &[usize],
    axes: &[i64],
    keepdim: bool,
) -> Result<Tensor<T>> {
    Ok(expand_reduced("reduce_sum_grad", dy, input_shape, axes, keepdim)?.0)
}

/// The gradient of [`reduce_mean`](super::reduce::reduce_mean): `dy / count` broadcast back over
/// the reduced axes, `count` being the number of reduced elements.
pub fn reduce_mean_grad<T: Real>(
    dy: &Tensor<T>,
    input_shape: &[usize],
    axes: &[i64],
    keepdim: bool,
) -> Result<Tensor<T>> {
    let (g, count) = expand_reduced("reduce_mean_grad", dy, input_shape, axes, keepdim)?;
    let count = T::lit(count as f64);
    Ok(g.map(|v| v / count))
}

/// The gradient of [`reduce_max`](super::reduce::reduce_max) from its input `x`: `dy` goes to the
/// elements equal to their group's maximum, split evenly among ties (a NaN maximum sends it to
/// the NaN elements).
pub fn reduce_max_grad<T: Real>(
    x: &Tensor<T>,
    dy: &Tensor<T>,
    axes: &[i64],
    keepdim: bool,
) -> Result<Tensor<T>> {
    const OP: &str = "reduce_max_grad";
    let (g, _) = expand_reduced(OP, dy, x.shape(), axes, keepdim)?;
    let m = super::reduce::reduce_max(x, axes, true)?;
    let hit = |v: T, m: T| v == m || (v.is_nan() && m.is_nan());
    let mask = zip_with(OP, x, &m, |v, m| if hit(v, m) { T::one() } else { T::zero() })?;
    let ties = super::reduce::reduce_sum(&mask, axes, true)?;
    let share = zip_with(OP, &mask, &ties, |k, t| k / t)?;
    zip_with(OP, &share, &g, |s, g| s * g)
}

/// The gradient of [`transpose`] by `perm`: `dy` transposed by the inverse permutation.
pub fn transpose_grad<T: Copy>(dy: &Tensor<T>, perm: &[usize]) -> Result<Tensor<T>> {
    transpose(dy, &inverse_permutation(perm)?)
}

/// The gradient of [`concat`](super::shape::concat) along `axis` of inputs whose extents along
/// that axis were `sizes`: `dy` split into consecutive slices of those extents.
pub fn concat_grad<T: Copy>(dy: &Tensor<T>, sizes: &[usize], axis: i64) -> Result<Vec<Tensor<T>>> {
    const OP: &str = "concat_grad";
    let axis = normalize_axis(OP, axis, dy.rank())?;
    let total = sizes.iter().try_fold(0usize, |acc, &s| acc.checked_add(s));
    if total != Some(dy.shape()[axis]) {
        return Err(KernelError::shape(
            OP,
            format!("sizes {sizes:?} do not add up to extent {} of axis {axis}", dy.shape()[axis]),
        ));
    }
    let mut start = vec![0; dy.rank()];
    let mut end = dy.shape().to_vec();
    let mut parts = Vec::with_capacity(sizes.len());
    for &s in sizes {
        end[axis] = start[axis] + s;
        parts.push(slice(dy, &start, &end)?);
        start[axis] = end[axis];
    }
    Ok(parts)
}
