//! Evaluation of ops on tensors known at import time. Exporters compute shapes at run time
//! (`Shape → Gather → Unsqueeze → Concat → Reshape`) and build masks and scalars from constants;
//! fbc's shapes are static, so those subgraphs are evaluated here and never reach the IR.
//! Values are computed in f64 and rounded to the result's ONNX type.

use crate::host::{numel, DType, Data, HostTensor, MAX_FOLDED_ELEMS};

/// Row-major strides of `shape`.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// NumPy broadcasting of two shapes.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Result<Vec<usize>, String> {
    let r = a.len().max(b.len());
    let mut out = vec![0; r];
    for i in 0..r {
        let da = if i + a.len() >= r { a[i + a.len() - r] } else { 1 };
        let db = if i + b.len() >= r { b[i + b.len() - r] } else { 1 };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return Err(format!(
                    "shapes {} and {} do not broadcast",
                    crate::host::fmt_shape(a),
                    crate::host::fmt_shape(b)
                ))
            }
        };
    }
    Ok(out)
}

/// A tensor of `shape` whose element at each index is `src`'s element at `f(index)` (a flat
/// index into `src`).
pub fn gather_by(
    src: &HostTensor,
    shape: Vec<usize>,
    f: impl Fn(&[usize]) -> usize,
) -> Result<HostTensor, String> {
    let n = numel(&shape)?;
    if n > MAX_FOLDED_ELEMS {
        return Err(format!("a constant of {n} elements is too large to fold"));
    }
    let mut idx = vec![0usize; shape.len()];
    let mut flat = Vec::with_capacity(n);
    for _ in 0..n {
        flat.push(f(&idx));
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    let data = match &src.data {
        Data::F32(v) => Data::F32(flat.iter().map(|&i| v[i]).collect()),
        Data::F64(v) => Data::F64(flat.iter().map(|&i| v[i]).collect()),
        Data::I64(v) => Data::I64(flat.iter().map(|&i| v[i]).collect()),
    };
    Ok(HostTensor { dtype: src.dtype, shape, data })
}

/// The flat index into a tensor of `shape` (broadcast to `out_rank` dimensions) of the output
/// index `idx`.
fn broadcast_index(idx: &[usize], shape: &[usize], st: &[usize]) -> usize {
    let off = idx.len() - shape.len();
    shape.iter().enumerate().map(|(d, &n)| if n == 1 { 0 } else { idx[off + d] * st[d] }).sum()
}

/// `t` broadcast to `shape`.
pub fn broadcast_to(t: &HostTensor, shape: &[usize]) -> Result<HostTensor, String> {
    let st = strides(&t.shape);
    gather_by(t, shape.to_vec(), |i| broadcast_index(i, &t.shape, &st))
}

/// An elementwise op on broadcast operands, computed in f64; the result has type `dtype`.
pub fn elementwise(
    xs: &[&HostTensor],
    dtype: DType,
    f: impl Fn(&[f64]) -> f64,
) -> Result<HostTensor, String> {
    let mut shape: Vec<usize> = Vec::new();
    for x in xs {
        shape = broadcast_shapes(&shape, &x.shape)?;
    }
    let n = numel(&shape)?;
    if n > MAX_FOLDED_ELEMS {
        return Err(format!("a constant of {n} elements is too large to fold"));
    }
    let sts: Vec<Vec<usize>> = xs.iter().map(|x| strides(&x.shape)).collect();
    let mut idx = vec![0usize; shape.len()];
    let mut args = vec![0.0; xs.len()];
    let mut vals = Vec::with_capacity(n);
    for _ in 0..n {
        for (k, x) in xs.iter().enumerate() {
            args[k] = x.get(broadcast_index(&idx, &x.shape, &sts[k]));
        }
        vals.push(f(&args));
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok(HostTensor::from_f64(dtype, shape, vals.into_iter()))
}

/// `t` with its dimensions permuted (`out.shape[i] = t.shape[perm[i]]`).
pub fn transpose(t: &HostTensor, perm: &[usize]) -> Result<HostTensor, String> {
    let st = strides(&t.shape);
    let shape: Vec<usize> = perm.iter().map(|&p| t.shape[p]).collect();
    gather_by(t, shape, |i| i.iter().zip(perm).map(|(&x, &p)| x * st[p]).sum())
}

/// `t[start[d] + i * step[d]]` along every axis, `shape` elements each.
pub fn strided_slice(
    t: &HostTensor,
    start: &[i64],
    step: &[i64],
    shape: Vec<usize>,
) -> Result<HostTensor, String> {
    let st = strides(&t.shape);
    gather_by(t, shape, |i| {
        i.iter().enumerate().map(|(d, &x)| (start[d] + x as i64 * step[d]) as usize * st[d]).sum()
    })
}

/// Concatenation along `axis`.
pub fn concat(xs: &[&HostTensor], axis: usize) -> Result<HostTensor, String> {
    let first = xs.first().ok_or("Concat of nothing")?;
    let mut shape = first.shape.clone();
    shape[axis] = xs.iter().map(|x| x.shape[axis]).sum();
    // The piece each output position along `axis` comes from, and its position there.
    let mut piece = Vec::with_capacity(shape[axis]);
    for (k, x) in xs.iter().enumerate() {
        piece.extend((0..x.shape[axis]).map(|j| (k, j)));
    }
    let sts: Vec<Vec<usize>> = xs.iter().map(|x| strides(&x.shape)).collect();
    let offsets: Vec<usize> = xs
        .iter()
        .scan(0usize, |acc, x| {
            let o = *acc;
            *acc += x.numel();
            Some(o)
        })
        .collect();
    let all = HostTensor::from_f64(
        first.dtype,
        vec![offsets.last().copied().unwrap_or(0) + xs.last().map_or(0, |x| x.numel())],
        xs.iter().flat_map(|x| (0..x.numel()).map(move |i| x.get(i))),
    );
    gather_by(&all, shape, |i| {
        let (k, j) = piece[i[axis]];
        offsets[k]
            + i.iter()
                .enumerate()
                .map(|(d, &x)| if d == axis { j } else { x } * sts[k][d])
                .sum::<usize>()
    })
}

/// A reduction of `t` over `axes` (sorted, distinct), kept with size 1 when `keep`: `init` then
/// `f(acc, x)` per element, `finish(acc, count)` per output.
pub fn reduce(
    t: &HostTensor,
    axes: &[usize],
    keep: bool,
    init: f64,
    f: impl Fn(f64, f64) -> f64,
    finish: impl Fn(f64, usize) -> f64,
) -> Result<HostTensor, String> {
    let kept: Vec<usize> =
        t.shape.iter().enumerate().map(|(d, &n)| if axes.contains(&d) { 1 } else { n }).collect();
    let out_n = numel(&kept)?;
    let count: usize = axes.iter().map(|&a| t.shape[a]).product();
    let ost = strides(&kept);
    let mut acc = vec![init; out_n];
    let mut idx = vec![0usize; t.shape.len()];
    for i in 0..t.numel() {
        let o: usize = idx
            .iter()
            .enumerate()
            .map(|(d, &x)| if axes.contains(&d) { 0 } else { x * ost[d] })
            .sum();
        acc[o] = f(acc[o], t.get(i));
        for d in (0..t.shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < t.shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    let shape = if keep {
        kept
    } else {
        t.shape.iter().enumerate().filter(|(d, _)| !axes.contains(d)).map(|(_, &n)| n).collect()
    };
    Ok(HostTensor::from_f64(t.dtype, shape, acc.into_iter().map(|a| finish(a, count))))
}
