//! Neural-network kernels: softmax, layer and RMS normalisation, rotary embedding, embedding
//! lookup and cross-entropy.
//!
//! Row-wise kernels view the operand as `[outer, len, inner]` around their axis and treat each
//! `(outer, inner)` pair as one row; statistics are accumulated in `T` in row order, with the
//! two-pass (mean, then squared deviations) variance.

use super::elementwise::max1;
use super::error::{KernelError, Result};
use super::layout::{checked_numel, normalize_axis, split_at_axis, unravel};
use super::scalar::Real;
use super::tensor::Tensor;

/// Calls `f(offsets)` for every row of `shape` along `axis`, with the flat offsets of the row's
/// elements in order.
pub(crate) fn for_each_row(shape: &[usize], axis: usize, mut f: impl FnMut(&[usize])) {
    let (outer, len, inner) = split_at_axis(shape, axis);
    let mut offsets = vec![0; len];
    for o in 0..outer {
        for j in 0..inner {
            for (i, slot) in offsets.iter_mut().enumerate() {
                *slot = (o * len + i) * inner + j;
            }
            f(&offsets);
        }
    }
}

/// `tensor.softmax`: `exp(x - max) / Σ exp(x - max)` along `axis` (negative counts from the
/// end), subtracting the row maximum first so no finite input overflows. A row of all `-inf`
/// gives NaN, as `0/0`; so does a row holding NaN or `+inf`.
pub fn softmax<T: Real>(x: &Tensor<T>, axis: i64) -> Result<Tensor<T>> {
    let axis = normalize_axis("softmax", axis, x.rank())?;
    let mut out = x.clone();
    let data = out.data_mut();
    for_each_row(x.shape(), axis, |row| {
        let max = row.iter().fold(T::neg_infinity(), |m, &o| max1(m, data[o]));
        let mut sum = T::zero();
        for &o in row {
            data[o] = (data[o] - max).exp();
            sum = sum + data[o];
        }
        for &o in row {
            data[o] = data[o] / sum;
        }
    });
    Ok(out)
}

/// `x - logsumexp(x)` along `axis`, with the log-sum-exp taken stably (`max + ln Σ exp(x -
/// max)`). Not a dialect op; cross-entropy is built on the same formula.
pub fn log_softmax<T: Real>(x: &Tensor<T>, axis: i64) -> Result<Tensor<T>> {
    let axis = normalize_axis("log_softmax", axis, x.rank())?;
    let mut out = x.clone();
    let data = out.data_mut();
    for_each_row(x.shape(), axis, |row| {
        let lse = logsumexp(row.iter().map(|&o| data[o]));
        for &o in row {
            data[o] = data[o] - lse;
        }
    });
    Ok(out)
}

/// `ln Σ exp(v)`, stably: `+inf` when some `v` is `+inf`, NaN when some `v` is NaN (the row
/// maximum propagates NaN, like `tensor.reduce_max`).
pub(crate) fn logsumexp<T: Real>(values: impl Iterator<Item = T> + Clone) -> T {
    let max = values.clone().fold(T::neg_infinity(), max1);
    if max == T::infinity() {
        return max;
    }
    let sum = values.fold(T::zero(), |s, v| s + (v - max).exp());
    max + sum.ln()
}

/// Errors unless `param` (a gamma or beta) has shape `[len]`.
pub(crate) fn check_param<T>(
    op: &'static str,
    name: &str,
    param: &Tensor<T>,
    len: usize,
) -> Result<()> {
    if param.shape() == [len] {
        Ok(())
    } else {
        Err(KernelError::shape(
            op,
            format!("{name} must have shape [{len}], got {:?}", param.shape()),
        ))
    }
}

/// Mean and biased variance of the elements of `data` at `row`.
pub(crate) fn row_moments<T: Real>(data: &[T], row: &[usize]) -> (T, T) {
    let n = T::lit(row.len() as f64);
    let mean = row.iter().fold(T::zero(), |s, &o| s + data[o]) / n;
    let var = row.iter().fold(T::zero(), |s, &o| {
        let d = data[o] - mean;
        s + d * d
    }) / n;
    (mean, var)
}

/// `tensor.layernorm`: `(x - mean) / sqrt(var + eps) · gamma + beta` along `axis` (negative counts
/// from the end), with the biased variance `mean((x - mean)²)`. `gamma` and `beta` have shape
/// `[x.shape[axis]]` and broadcast along that axis; `eps` is rounded to `T`.
pub fn layernorm<T: Real>(
    x: &Tensor<T>,
    gamma: &Tensor<T>,
    beta: &Tensor<T>,
    axis: i64,
    eps: f64,
) -> Result<Tensor<T>> {
    const OP: &str = "layernorm";
    let axis = normalize_axis(OP, axis, x.rank())?;
    let len = x.shape()[axis];
    check_param(OP, "gamma", gamma, len)?;
    check_param(OP, "beta", beta, len)?;
    let eps = T::lit(eps);
    let mut out = x.clone();
    let data = out.data_mut();
    for_each_row(x.shape(), axis, |row| {
        let (mean, var) = row_moments(x.data(), row);
        let rstd = (var + eps).sqrt().recip();
        for (i, &o) in row.iter().enumerate() {
            data[o] = (x.data()[o] - mean) * rstd * gamma.data()[i] + beta.data()[i];
        }
    });
    Ok(out)
}

/// `tensor.rmsnorm`: `x / sqrt(mean(x²) + eps) · gamma` over the last axis; `gamma` has shape
/// `[x.shape[-1]]`; `eps` is rounded to `T`. Errors on rank 0.
pub fn rmsnorm<T: Real>(x: &Tensor<T>, gamma: &Tensor<T>, eps: f64) -> Result<Tensor<T>> {
    const OP: &str = "rmsnorm";
    let axis = normalize_axis(OP, -1, x.rank())?;
    check_param(OP, "gamma", gamma, x.shape()[axis])?;
    let eps = T::lit(eps);
    let mut out = x.clone();
    let data = out.data_mut();
    for_each_row(x.shape(), axis, |row| {
        let rstd = rms_rstd(x.data(), row, eps);
        for (i, &o) in row.iter().enumerate() {
            data[o] = x.data()[o] * rstd * gamma.data()[i];
        }
    });
    Ok(out)
}

/// `1 / sqrt(mean(x²) + eps)` over `row`.
pub(crate) fn rms_rstd<T: Real>(data: &[T], row: &[usize], eps: T) -> T {
    let n = T::lit(row.len() as f64);
    let ms = row.iter().fold(T::zero(), |s, &o| s + data[o] * data[o]) / n;
    (ms + eps).sqrt().recip()
}

/// Checks rope's operands and returns `(S, D)`.
pub(crate) fn check_rope<T>(
    op: &'static str,
    x: &Tensor<T>,
    cos: &Tensor<T>,
    sin: &Tensor<T>,
) -> Result<(usize, usize)> {
    let r = x.rank();
    if r < 2 {
        return Err(KernelError::shape(
            op,
            format!("x must have rank >= 2 ([..., S, D]), got {:?}", x.shape()),
        ));
    }
    let (s, d) = (x.shape()[r - 2], x.shape()[r - 1]);
    if d % 2 != 0 {
        return Err(KernelError::shape(op, format!("head dimension D = {d} must be even")));
    }
    for (name, t) in [("cos", cos), ("sin", sin)] {
        if t.shape() != [s, d] {
            return Err(KernelError::shape(
                op,
                format!("{name} must have shape [{s}, {d}] (S, D of x), got {:?}", t.shape()),
            ));
        }
    }
    Ok((s, d))
}

/// `tensor.rope`: rotary position embedding of `x [..., S, D]` with tables `cos [S, D]` and
/// `sin [S, D]`: `x·cos + rotate_half(x)·sin`, where `rotate_half(x) = concat(-x[..., D/2:],
/// x[..., :D/2])` on the last axis (the "half-split" GPT-NeoX/Llama convention; `D` must be
/// even). Position `s` of every batch row uses row `s` of the tables.
pub fn rope<T: Real>(x: &Tensor<T>, cos: &Tensor<T>, sin: &Tensor<T>) -> Result<Tensor<T>> {
    let (s, d) = check_rope("rope", x, cos, sin)?;
    let mut out = x.clone();
    if d == 0 {
        return Ok(out);
    }
    let h = d / 2;
    let rows = x.data().chunks_exact(d).zip(out.data_mut().chunks_exact_mut(d));
    for (r, (v, dst)) in rows.enumerate() {
        // Rows run over [..., S] in order, so row r sits at position r mod S.
        let pos = (r % s) * d;
        let (c, sn) = (&cos.data()[pos..pos + d], &sin.data()[pos..pos + d]);
        for i in 0..d {
            let rotated = if i < h { -v[i + h] } else { v[i - h] };
            dst[i] = v[i] * c[i] + rotated * sn[i];
        }
    }
    Ok(out)
}

/// Errors unless every element of `ids` is in `0..bound`, naming the first that is not.
pub(crate) fn check_ids(
    op: &'static str,
    what: &'static str,
    ids: &Tensor<i32>,
    bound: usize,
) -> Result<()> {
    match ids.data().iter().position(|&id| usize::try_from(id).map_or(true, |u| u >= bound)) {
        None => Ok(()),
        Some(flat) => Err(KernelError::OutOfRange {
            op,
            what,
            value: i64::from(ids.data()[flat]),
            index: unravel(flat, ids.shape()),
            bound,
        }),
    }
}

/// `tensor.embedding`: rows of `table [V, D]` gathered by `ids [...]` (i32), giving
/// `[..., D]` with `out[i..., :] = table[ids[i...], :]`. Errors when `table` is not rank 2 or an
/// id is outside `0..V` (the error names the id and its index).
pub fn embedding<T: Real>(table: &Tensor<T>, ids: &Tensor<i32>) -> Result<Tensor<T>> {
    const OP: &str = "embedding";
    let [v, d] = *table.shape() else {
        return Err(KernelError::shape(
            OP,
            format!("table must have shape [V, D], got {:?}", table.shape()),
        ));
    };
    check_ids(OP, "id", ids, v)?;
    let mut shape = ids.shape().to_vec();
    shape.push(d);
    let n = checked_numel(OP, &shape)?;
    let mut data = Vec::with_capacity(n);
    for &id in ids.data() {
        let id = id as usize;
        data.extend_from_slice(&table.data()[id * d..(id + 1) * d]);
    }
    Ok(Tensor::from_parts(shape, data))
}

/// Checks cross-entropy's operands and returns `(N, C)`.
pub(crate) fn check_cross_entropy<T>(
    op: &'static str,
    logits: &Tensor<T>,
    labels: &Tensor<i32>,
) -> Result<(usize, usize)> {
    let [n, c] = *logits.shape() else {
        return Err(KernelError::shape(
            op,
            format!("logits must have shape [N, C], got {:?}", logits.shape()),
        ));
    };
    if labels.shape() != [n] {
        return Err(KernelError::shape(
            op,
            format!("labels must have shape [{n}] (N of logits), got {:?}", labels.shape()),
        ));
    }
    check_ids(op, "label", labels, c)?;
    Ok((n, c))
}

/// `tensor.cross_entropy`: `mean_n(logsumexp(logits[n, :]) - logits[n, labels[n]])`, i.e. the
/// mean over the batch of `-log softmax(logits)[n, label]`, as a rank-0 tensor. Computed with a
/// stable log-sum-exp, so it is finite for any finite logits. `N = 0` gives NaN (an empty mean).
/// Errors on shapes other than `[N, C]` and `[N]`, or a label outside `0..C`.
pub fn cross_entropy<T: Real>(logits: &Tensor<T>, labels: &Tensor<i32>) -> Result<Tensor<T>> {
    let (n, c) = check_cross_entropy("cross_entropy", logits, labels)?;
    let mut total = T::zero();
    if c > 0 {
        for (row, &label) in logits.data().chunks_exact(c).zip(labels.data()) {
            total = total + (logsumexp(row.iter().copied()) - row[label as usize]);
        }
    }
    Ok(Tensor::scalar(total / T::lit(n as f64)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_close(got: &[f64], want: &[f64], tol: f64) {
        assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() <= tol * w.abs().max(1.0), "got {got:?}, want {want:?}");
        }
    }

    #[test]
    fn softmax_of_one_two_three() {
        // e^k / (e + e² + e³) for k = 1, 2, 3.
        let want = [0.090_030_573_170_380_46, 0.244_728_471_054_797_67, 0.665_240_955_774_821_9];
        let x = Tensor::from_vec(vec![1.0f64, 2.0, 3.0]);
        assert_close(softmax(&x, -1).unwrap().data(), &want, 1e-15);
        // Shifting by a constant changes nothing, even where exp would overflow.
        let big = Tensor::from_vec(vec![1001.0f64, 1002.0, 1003.0]);
        assert_close(softmax(&big, 0).unwrap().data(), &want, 1e-14);
        // Along axis 0 of a [3, 2] tensor: each column is normalised separately.
        let x = Tensor::new(vec![3, 2], vec![1.0f64, 0.0, 2.0, 0.0, 3.0, 0.0]).unwrap();
        let y = softmax(&x, 0).unwrap();
        let third = 1.0 / 3.0;
        assert_close(y.data(), &[want[0], third, want[1], third, want[2], third], 1e-15);
        let ls = log_softmax(&Tensor::from_vec(vec![1.0f64, 2.0, 3.0]), 0).unwrap();
        assert_close(ls.data(), &want.map(f64::ln), 1e-15);
        assert!(softmax(&x, 2).is_err());
        assert!(softmax(&Tensor::scalar(1.0f32), -1).is_err());
    }

    #[test]
    fn layernorm_of_one_to_four() {
        // mean 2.5, biased variance 1.25; with eps = 0.75 the denominator is sqrt(2).
        let x = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0]);
        let ones = Tensor::from_vec(vec![1.0f64; 4]);
        let zeros = Tensor::from_vec(vec![0.0f64; 4]);
        let y = layernorm(&x, &ones, &zeros, -1, 0.75).unwrap();
        let r = std::f64::consts::FRAC_1_SQRT_2;
        assert_close(y.data(), &[-1.5 * r, -0.5 * r, 0.5 * r, 1.5 * r], 1e-15);
        // eps = 0: (x - 2.5) / sqrt(1.25), then gamma and beta per position.
        let gamma = Tensor::from_vec(vec![1.0, 1.0, 2.0, 1.0]);
        let beta = Tensor::from_vec(vec![0.0, 1.0, 0.0, 0.0]);
        let y = layernorm(&x, &gamma, &beta, 0, 0.0).unwrap();
        let want = [
            -1.341_640_786_499_873_8,
            0.552_786_404_500_042_1,
            0.894_427_190_999_915_9,
            1.341_640_786_499_873_8,
        ];
        assert_close(y.data(), &want, 1e-15);
    }

    #[test]
    fn layernorm_along_a_middle_axis() {
        // x[i, j, k] over [1, 2, 2]; normalising axis 1 pairs (x[0,0,k], x[0,1,k]).
        let x = Tensor::new(vec![1, 2, 2], vec![1.0f64, 10.0, 3.0, 20.0]).unwrap();
        let gamma = Tensor::from_vec(vec![1.0, 2.0]);
        let beta = Tensor::from_vec(vec![0.5, 0.0]);
        let y = layernorm(&x, &gamma, &beta, 1, 0.0).unwrap();
        // Each pair normalises to (-1, +1); then gamma/beta by position along axis 1.
        assert_close(y.data(), &[-0.5, -0.5, 2.0, 2.0], 1e-15);
        let bad = Tensor::from_vec(vec![1.0, 2.0, 3.0]);
        assert!(layernorm(&x, &bad, &beta, 1, 0.0).is_err());
        assert!(layernorm(&x, &gamma, &bad, 1, 0.0).is_err());
        assert!(layernorm(&x, &gamma, &beta, 3, 0.0).is_err());
    }

    #[test]
    fn rmsnorm_of_one_to_four() {
        // mean(x²) = 30/4 = 7.5; with eps = 0.5 the rms is sqrt(8) = 2·sqrt(2).
        let x = Tensor::new(vec![1, 4], vec![1.0f64, 2.0, 3.0, 4.0]).unwrap();
        let gamma = Tensor::from_vec(vec![1.0, 1.0, 1.0, 2.0]);
        let y = rmsnorm(&x, &gamma, 0.5).unwrap();
        let r = 1.0 / 8f64.sqrt();
        assert_close(y.data(), &[r, 2.0 * r, 3.0 * r, 8.0 * r], 1e-15);
        assert!(rmsnorm(&x, &Tensor::from_vec(vec![1.0; 3]), 0.5).is_err());
        assert!(rmsnorm(&Tensor::scalar(1.0), &gamma, 0.5).is_err());
    }

    #[test]
    fn rope_with_d_four() {
        // rotate_half([1, 2, 3, 4]) = [-3, -4, 1, 2].
        // Row 0: cos = [1, .5, 0, 2], sin = [0, 1, 2, .5]:
        //   [1·1 + 0, 2·.5 - 4·1, 3·0 + 1·2, 4·2 + 2·.5] = [1, -3, 2, 9].
        // Row 1: cos = 1, sin = 0 leaves x alone; a second batch repeats the tables.
        let x =
            Tensor::from_fn(&[2, 2, 4], |i| (i[2] + 1) as f64 * if i[0] == 0 { 1.0 } else { -1.0 })
                .unwrap();
        let cos = Tensor::new(vec![2, 4], vec![1.0, 0.5, 0.0, 2.0, 1.0, 1.0, 1.0, 1.0]).unwrap();
        let sin = Tensor::new(vec![2, 4], vec![0.0, 1.0, 2.0, 0.5, 0.0, 0.0, 0.0, 0.0]).unwrap();
        let y = rope(&x, &cos, &sin).unwrap();
        #[rustfmt::skip]
        let want = [
            1.0, -3.0, 2.0, 9.0,     1.0, 2.0, 3.0, 4.0,
            -1.0, 3.0, -2.0, -9.0,   -1.0, -2.0, -3.0, -4.0,
        ];
        assert_eq!(y.data(), &want);
        let odd = Tensor::<f64>::zeros(&[2, 3]).unwrap();
        assert!(rope(&odd, &odd, &odd).is_err());
        assert!(rope(&x, &sin, &Tensor::zeros(&[1, 4]).unwrap()).is_err());
        assert!(rope(&Tensor::from_vec(vec![1.0, 2.0]), &cos, &sin).is_err());
    }

    #[test]
    fn embedding_gathers_rows() {
        let table = Tensor::new(vec![3, 2], vec![0.5f32, 1.5, 10.0, 20.0, -1.0, -2.0]).unwrap();
        let ids = Tensor::new(vec![2, 2], vec![2, 0, 1, 1]).unwrap();
        let y = embedding(&table, &ids).unwrap();
        assert_eq!(y.shape(), &[2, 2, 2]);
        assert_eq!(y.data(), &[-1.0, -2.0, 0.5, 1.5, 10.0, 20.0, 10.0, 20.0]);
        assert_eq!(embedding(&table, &Tensor::scalar(1)).unwrap().data(), &[10.0, 20.0]);
    }

    #[test]
    fn embedding_rejects_out_of_range_ids() {
        let table = Tensor::<f32>::zeros(&[3, 2]).unwrap();
        let ids = Tensor::new(vec![2, 2], vec![0, 1, 2, 3]).unwrap();
        let err = embedding(&table, &ids).unwrap_err();
        assert_eq!(
            err,
            KernelError::OutOfRange {
                op: "embedding",
                what: "id",
                value: 3,
                index: vec![1, 1],
                bound: 3
            }
        );
        assert_eq!(err.to_string(), "embedding: id 3 at index [1, 1] is out of range 0..3");
        let neg = Tensor::from_vec(vec![0, -1]);
        assert!(matches!(embedding(&table, &neg), Err(KernelError::OutOfRange { value: -1, .. })));
        assert!(embedding(&Tensor::<f32>::zeros(&[3]).unwrap(), &neg).is_err());
    }

    #[test]
    fn cross_entropy_by_hand() {
        // Row 0: -log softmax([1, 2, 3])[2] = -log 0.66524.. = 0.40760596444438.
        // Row 1: uniform over 3 classes: log 3 = 1.09861228866811.
        let logits = Tensor::new(vec![2, 3], vec![1.0f64, 2.0, 3.0, 1.0, 1.0, 1.0]).unwrap();
        let labels = Tensor::from_vec(vec![2, 0]);
        let loss = cross_entropy(&logits, &labels).unwrap();
        assert_eq!(loss.rank(), 0);
        assert_close(
            loss.data(),
            &[(0.407_605_964_444_380_3 + 1.098_612_288_668_109_8) / 2.0],
            1e-15,
        );
        // Large logits stay finite.
        let big = Tensor::new(vec![1, 2], vec![1000.0f32, 0.0]).unwrap();
        assert_eq!(cross_entropy(&big, &Tensor::from_vec(vec![1])).unwrap().data(), &[1000.0]);
    }

    #[test]
    fn cross_entropy_rejects_bad_labels_and_shapes() {
        let logits = Tensor::<f32>::zeros(&[2, 3]).unwrap();
        assert_eq!(
            cross_entropy(&logits, &Tensor::from_vec(vec![0, 3])),
            Err(KernelError::OutOfRange {
                op: "cross_entropy",
                what: "label",
                value: 3,
                index: vec![1],
                bound: 3
            })
        );
        assert!(cross_entropy(&logits, &Tensor::from_vec(vec![-2, 0])).is_err());
        assert!(cross_entropy(&logits, &Tensor::from_vec(vec![0])).is_err());
        assert!(cross_entropy(&Tensor::<f32>::zeros(&[6]).unwrap(), &Tensor::from_vec(vec![0]))
            .is_err());
    }
}

/// `tensor.causal_mask`: `[s, m]` with 0 where key `j` is seen from query `i` at position
/// `pos + i` (`j ≤ pos + i`, and `j + window > pos + i` with a window), `-inf` elsewhere.
pub fn causal_mask<T: Real>(pos: i64, s: usize, m: usize, window: u64) -> Result<Tensor<T>> {
    let n = checked_numel("causal_mask", &[s, m])?;
    let data = (0..n)
        .map(|x| {
            let (i, j) = ((x / m.max(1)) as i128, (x % m.max(1)) as i128);
            let at = i128::from(pos) + i;
            let seen = j <= at && (window == 0 || j + i128::from(window) > at);
            if seen {
                T::zero()
            } else {
                T::neg_infinity()
            }
        })
        .collect();
    Tensor::new(vec![s, m], data)
}

/// The options of [`attention`] beyond its tensors.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionOptions {
    pub scale: f64,
    /// `c · tanh(s / c)` on the scaled scores; 0: none.
    pub softcap: f64,
    /// With `Some(pos)`: the mask of [`causal_mask`] at `pos` (with `window`).
    pub causal: Option<i64>,
    pub window: u64,
}

/// `tensor.attention`, as the graph it replaces, op by op (so the interpreter gives the numbers
/// of the unfused graph, bit for bit): `q' = rope(q, cos, sin)` (with tables), each key and
/// value head repeated for its `H / KV` query heads, scores `q'·kᵀ` (`matmul`), `scale`d, the
/// soft cap as `scale(tanh(scale(s, 1/c)), c)`, plus the causal mask, `softmax` along the keys,
/// times `v`. `q` is `[B, H, S, D]`, `k` and `v` `[B, KV, M, D]`.
pub fn attention<T: Real>(
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
    rope_tables: Option<(&Tensor<T>, &Tensor<T>)>,
    o: AttentionOptions,
) -> Result<Tensor<T>> {
    use super::elementwise::{add, scale, tanh};
    use super::shape::{broadcast, reshape};
    const OP: &str = "attention";
    let shape_err = |message: String| KernelError::Shape { op: OP, message };
    let ([b, h, s, d], [kb, kv, m, kd]) = (q.shape(), k.shape()) else {
        return Err(shape_err(format!("q {:?} and k {:?} must have rank 4", q.shape(), k.shape())));
    };
    let (b, h, s, d, kv, m) = (*b, *h, *s, *d, *kv, *m);
    if *kb != b || *kd != d || v.shape() != k.shape() || kv == 0 || h % kv != 0 {
        return Err(shape_err(format!(
            "q {:?}, k {:?} and v {:?} do not fit [B, H, S, D], [B, KV, M, D] with KV dividing H",
            q.shape(),
            k.shape(),
            v.shape()
        )));
    }
    let q = match rope_tables {
        Some((cos, sin)) => rope(q, cos, sin)?,
        None => q.clone(),
    };
    let heads = |x: &Tensor<T>| -> Result<Tensor<T>> {
        if kv == h {
            return Ok(x.clone());
        }
        let g = h / kv;
        let one = reshape(x, &[b, kv, 1, m, d])?;
        reshape(&broadcast(&one, &[b, kv, g, m, d])?, &[b, h, m, d])
    };
    let mut scores = scale(&super::matmul::matmul(&q, &heads(k)?, false, true)?, o.scale);
    if o.softcap > 0.0 {
        scores = scale(&tanh(&scale(&scores, 1.0 / o.softcap)), o.softcap);
    }
    if let Some(pos) = o.causal {
        scores = add(&scores, &causal_mask::<T>(pos, s, m, o.window)?)?;
    }
    super::matmul::matmul(&softmax(&scores, -1)?, &heads(v)?, false, false)
}
